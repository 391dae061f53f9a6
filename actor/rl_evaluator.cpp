#include "actor/rl_evaluator.hpp"

#include <c10/core/InferenceMode.h>
#include <torch/types.h>
#include <torch/utils.h>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <vector>

#include "actor/attach.hpp"
#include "actor/evaluation_loop.hpp"
#include "common/clock.hpp"
#include "common/error.hpp"
#include "common/log.hpp"
#include "common/torch/rl_model.hpp"
#include "envs/seeds.hpp"
#include "envs/vec_env.hpp"

namespace tandem::actor {
namespace {

using Clock = std::chrono::steady_clock;


}  // namespace

EpisodeStats play_greedy(Model& model, const PolicyHead& head, const envs::EnvSource& source, std::int64_t episodes,
                         std::uint64_t job_seed, std::uint32_t actor_index, const std::function<bool()>& abandon) {
  const auto start = Clock::now();
  const int n = static_cast<int>(std::clamp<std::int64_t>(episodes, 1, 64));
  envs::VecEnv env(source.make(n), job_seed, actor_index);
  std::vector<std::int64_t> quota(static_cast<std::size_t>(n)), played(static_cast<std::size_t>(n), 0);
  for (int e = 0; e < n; ++e) quota[static_cast<std::size_t>(e)] = episodes / n + (e < episodes % n ? 1 : 0);
  std::vector<std::int32_t> discrete(static_cast<std::size_t>(n));
  std::vector<float> continuous;

  EpisodeStats r;
  r.return_min = std::numeric_limits<double>::infinity();
  r.return_max = -std::numeric_limits<double>::infinity();
  double length_sum = 0, return_sum = 0;
  c10::InferenceMode inference;
  while (r.episodes < episodes) {
    if (abandon && abandon()) {
      r.complete = false;
      return r;
    }
    const torch::Tensor x = torch::from_blob(const_cast<float*>(env.observations().data()),
                                             rl_model_input_shape(n, model.spec()), torch::kFloat32);
    const torch::Tensor actions =
        head.greedy(model.forward_heads(x).at(0).reshape({n, head.params_dim()})).contiguous();
    bool ok = false;
    if (head.is_continuous()) {
      const torch::Tensor a = actions.to(torch::kFloat32).contiguous();
      continuous.assign(a.data_ptr<float>(), a.data_ptr<float>() + a.numel());
      ok = env.step(std::span<const float>(continuous));
    } else {
      const torch::Tensor a = actions.to(torch::kInt32).contiguous();
      std::copy_n(a.data_ptr<std::int32_t>(), n, discrete.begin());
      ok = env.step(std::span<const std::int32_t>(discrete));
    }
    if (!ok)
      fail("env '{}' refused the policy's actions: the model's head does not fit its action space", env.spec().name);
    for (int e = 0; e < n; ++e) {
      const auto i = static_cast<std::size_t>(e);
      if (!env.done(e) || played[i] == quota[i]) continue;
      ++played[i];
      ++r.episodes;
      const double ret = env.episode_returns()[i];
      return_sum += ret;
      length_sum += env.episode_lengths()[i];
      r.return_min = std::min(r.return_min, ret);
      r.return_max = std::max(r.return_max, ret);
    }
  }
  r.return_mean = return_sum / static_cast<double>(r.episodes);
  r.length_mean = length_sum / static_cast<double>(r.episodes);
  r.seconds = seconds_since(start);
  return r;
}

int run_rl_evaluator(const JobSettings& settings, const ActorContext& ctx) {
  torch::set_num_threads(settings.actor.threads);
  const envs::EnvSource source(settings.env);
  const PolicyHead head = policy_head_for(source.spec());
  Model model = make_rl_model(settings.model, settings.rl, source.spec());
  FlatParams flat = FlatParams::flatten(model);
  const std::string slab = shm::job_segment_name(ctx.job, shm::Kind::weights);
  std::optional<Follower> follower = wait_for_follower(slab, flat, settings.model.name, settings.actor.wait_weights_s,
                                                       ctx);
  if (!follower) return 0;
  const std::int64_t episodes = settings.actor.eval_episodes;
  const std::uint64_t seed = envs::eval_seed(settings.env.seed);
  log::info("RL evaluator: {} greedy episodes of '{}' per version with {}, following /{}", episodes, source.spec().name,
            model.describe(), slab);
  return run_evaluation_loop(*follower, ctx, settings.actor.min_interval_s, [&](const std::function<bool()>& abandon) {
    const EpisodeStats r = play_greedy(model, head, source, episodes, seed, ctx.index, abandon);
    return Evaluation{
        .complete = r.complete,
        .done = fmt::format("{} episodes", r.episodes),
        .metrics = {.seconds = r.seconds, .episode_return = r.return_mean, .episode_length = r.length_mean},
        .row = {{"episode_return", r.return_mean},
                {"episode_return_min", r.return_min},
                {"episode_return_max", r.return_max},
                {"episode_length", r.length_mean},
                {"episodes", r.episodes},
                {"seconds", r.seconds}},
        .summary = fmt::format("greedy return {:.1f} (min {:.1f}, max {:.1f}), length {:.1f} over {} episodes in "
                               "{:.2f} s",
                               r.return_mean, r.return_min, r.return_max, r.length_mean, r.episodes, r.seconds)};
  });
}

}  // namespace tandem::actor
