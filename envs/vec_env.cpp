#include "envs/vec_env.hpp"

#include "common/error.hpp"

namespace tandem::envs {

VecEnv::VecEnv(std::vector<std::unique_ptr<Env>> envs, std::uint64_t job_seed, std::uint32_t actor_index,
               std::uint32_t restarts, int threads)
    : actor_index_(actor_index), envs_(std::move(envs)) {
  if (envs_.empty()) fail("a vectorised env needs at least one env: set env.envs >= 1");
  if (threads < 1 || threads > size())
    fail("a vectorised env of {} envs steps them on 1 to {} threads, not {}: set env.threads to at most env.envs",
         size(), size(), threads);
  spec_ = envs_[0]->spec();
  for (const auto& env : envs_) require_spaces(env->spec(), spec_);
  const std::size_t n = envs_.size(), dim = static_cast<std::size_t>(spec_.obs_dim);
  obs_.assign(n * dim, 0.0f);
  observations_ = obs_.data();
  final_obs_.assign(n * dim, 0.0f);
  rewards_.assign(n, 0.0f);
  terminated_.assign(n, 0);
  truncated_.assign(n, 0);
  episodes_.assign(n, Episode{});
  episode_returns_.assign(n, 0.0);
  episode_lengths_.assign(n, 0);
  rngs_.reserve(n);
  for (std::size_t e = 0; e < n; ++e) {
    rngs_.emplace_back(env_seed(job_seed, actor_index, e, restarts));
    envs_[e]->reset(rngs_[e], &obs_[e * dim]);
  }
  if (threads > 1) workers_ = std::make_unique<StepWorkers>(size(), threads);
}

VecEnv::~VecEnv() = default;

template <class PerEnv>
void VecEnv::for_each_env(const PerEnv& per_env) {
  if (workers_) {
    workers_->run(per_env);
    return;
  }
  for (int e = 0; e < size(); ++e) per_env(e);
}

void VecEnv::reset(std::optional<std::uint64_t> job_seed) {
  for_each_env([&](int e) {
    if (job_seed) rngs_[e] = Rng(env_seed(*job_seed, actor_index_, e));
    reset_row(*envs_[e], rngs_[e], episodes_[e], row(e));
  });
}

void VecEnv::observe_into(std::span<float> rows) {
  if (rows.empty()) {
    observations_ = obs_.data();
    return;
  }
  if (rows.size() != obs_.size())
    fail("observe_into: {} floats for {} envs of {} observations: pass {}", rows.size(), size(), spec_.obs_dim,
         obs_.size());
  observations_ = rows.data();
}

StepRow VecEnv::row(int e) {
  const std::size_t dim = static_cast<std::size_t>(spec_.obs_dim);
  return {observations_ + e * dim, &final_obs_[e * dim], &rewards_[e],        &terminated_[e],
          &truncated_[e],          &episode_returns_[e], &episode_lengths_[e]};
}

void VecEnv::step_one(int e, ActionRef action) {
  step_with_autoreset(*envs_[e], rngs_[e], spec_.max_episode_steps, episodes_[e], action, row(e));
}

bool VecEnv::step(std::span<const std::int32_t> actions) {
  if (!spec_.discrete() || actions.size() != envs_.size()) return false;
  for (std::int32_t a : actions)
    if (a < 0 || a >= spec_.num_actions) return false;
  for_each_env([&](int e) { step_one(e, ActionRef{actions[e], nullptr}); });
  return true;
}

bool VecEnv::step(std::span<const float> actions) {
  const std::size_t dim = static_cast<std::size_t>(spec_.action_dim);
  if (spec_.discrete() || actions.size() != envs_.size() * dim) return false;
  for_each_env([&](int e) { step_one(e, ActionRef{0, &actions[e * dim]}); });
  return true;
}

}  // namespace tandem::envs
