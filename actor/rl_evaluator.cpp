#include "actor/rl_evaluator.hpp"

#include <c10/core/InferenceMode.h>
#include <torch/types.h>
#include <torch/utils.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <limits>
#include <thread>
#include <vector>

#include "actor/attach.hpp"
#include "common/error.hpp"
#include "common/log.hpp"
#include "common/program.hpp"
#include "envs/vec_env.hpp"

namespace tandem::actor {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

void append_line(const std::string& path, const nlohmann::json& row) {
  if (std::FILE* f = std::fopen(path.c_str(), "a")) {  // one write per line: O_APPEND keeps actors' lines whole
    std::fputs((row.dump() + "\n").c_str(), f);
    std::fclose(f);
  }
}

}  // namespace

EpisodeStats play_greedy(Model& model, const PolicyHead& head, const EnvSource& source, std::int64_t episodes,
                         std::uint64_t job_seed, std::uint32_t actor_index, const std::function<bool()>& abandon) {
  const auto start = Clock::now();
  const int n = static_cast<int>(std::clamp<std::int64_t>(episodes, 1, 64));
  envs::VecEnv env(source.make(n), job_seed, actor_index);
  std::vector<std::int64_t> quota(static_cast<std::size_t>(n)), played(static_cast<std::size_t>(n), 0);
  for (int e = 0; e < n; ++e) quota[static_cast<std::size_t>(e)] = episodes / n + (e < episodes % n ? 1 : 0);
  const int obs_dim = env.spec().obs_dim;
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
                                             model_input_shape(n, obs_dim), torch::kFloat32);
    const torch::Tensor actions = head.greedy(model.forward_heads(x).at(0).reshape({n, head.params_dim()})).contiguous();
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
    if (!ok) fail("env '{}' refused the policy's actions: the model's head does not fit its action space", env.spec().name);
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

int run_rl_evaluator(const Config& config, const ActorContext& ctx) {
  torch::set_num_threads(static_cast<int>(config.integer("actor.threads")));
  const EnvSource source(config);
  const PolicyHead head = policy_head_for(source.spec());
  Model model = make_rl_model(config, source.spec());
  FlatParams flat = model.nn_module() ? FlatParams::flatten(*model.nn_module()) : FlatParams::flatten(*model.jit_module());
  const std::string slab = shm::job_segment_name(ctx.job, "weights");
  Follower follower =
      wait_for_follower(slab, flat, config.string("model.name"), config.real("actor.wait_weights_s"), ctx);
  if (ctx.client) ctx.client->set_state(shm::ProcessState::running);
  const std::int64_t episodes = config.integer("actor.eval_episodes");
  const std::uint64_t seed = eval_seed(static_cast<std::uint64_t>(config.integer("env.seed")));
  log::info("RL evaluator: {} greedy episodes of '{}' per version with {}, following /{}", episodes,
            source.spec().name, model.describe(), slab);

  const std::string jsonl = ctx.run_dir + "/eval.jsonl";
  const double min_interval = config.real("actor.min_interval_s");
  std::uint64_t evaluations = 0, evaluated = 0;  // evaluated: the version evaluated last (0: none)
  Clock::time_point last_eval{};
  // Loads the newest version and evaluates it, unless it was evaluated already (an abandoned
  // evaluation leaves its version loaded and owed).
  auto evaluate_newest = [&](const std::function<bool()>& abandon) {
    (void)follower.update();
    const std::uint64_t version = follower.version();
    if (version == 0 || version == evaluated) return;
    if (ctx.client) ctx.client->saw_version(version);
    const EpisodeStats r = play_greedy(model, head, source, episodes, seed, ctx.index, [&] {
      ctx.beat();
      return abandon && abandon();
    });
    if (!r.complete) {
      log::info("version {}: evaluation abandoned after {} episodes (stop requested)", version, r.episodes);
      return;
    }
    evaluated = version;
    ++evaluations;
    last_eval = Clock::now();
    if (ctx.client)
      ctx.client->report({.step = evaluations, .version = version, .seconds = r.seconds,
                          .episode_return = r.return_mean, .episode_length = r.length_mean});
    append_line(jsonl, {{"job", ctx.job}, {"actor", ctx.index}, {"version", version}, {"step", follower.step()},
                        {"episode_return", r.return_mean}, {"episode_return_min", r.return_min},
                        {"episode_return_max", r.return_max}, {"episode_length", r.length_mean},
                        {"episodes", r.episodes}, {"seconds", r.seconds},
                        {"unix_s", std::chrono::duration<double>(
                                       std::chrono::system_clock::now().time_since_epoch()).count()}});
    log::info("version {} (step {}): greedy return {:.1f} (min {:.1f}, max {:.1f}), length {:.1f} over {} episodes "
              "in {:.2f} s", version, follower.step(), r.return_mean, r.return_min, r.return_max, r.length_mean,
              r.episodes, r.seconds);
  };

  const std::function<bool()> stop = [&] { return ctx.stopping(); };
  while (!ctx.stopping()) {
    ctx.beat();
    if (follower.has_new() && (evaluations == 0 || seconds_since(last_eval) >= min_interval)) evaluate_newest(stop);
    else std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (ctx.client) ctx.client->set_state(shm::ProcessState::stopping);
  // The final weights, unless the job failed (nobody waits for them); a signal (the launcher's
  // SIGTERM once the stop took too long) abandons them.
  const bool job_failed = ctx.client && ctx.client->block().stop_reason() == shm::StopReason::failure;
  if (!job_failed) evaluate_newest([&] { return ctx.client && stop_signal() != 0; });
  return 0;
}

}  // namespace tandem::actor
