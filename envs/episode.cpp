#include "envs/episode.hpp"

#include <algorithm>

namespace tandem::envs {

void step_with_autoreset(Env& env, Rng& rng, int max_episode_steps, Episode& episode, ActionRef action,
                         const StepRow& row) {
  const StepOut out = env.step(action, row.obs);
  *row.reward = out.reward;
  episode.running_return += out.reward;
  const std::int32_t length = ++episode.running_length;
  const bool out_of_time = max_episode_steps > 0 && length >= max_episode_steps;
  *row.terminated = out.terminated;
  *row.truncated = out.truncated || out_of_time;
  if (!out.terminated && !*row.truncated) return;
  std::copy_n(row.obs, env.spec().obs_dim, row.final_obs);
  *row.episode_return = episode.running_return;
  *row.episode_length = length;
  episode = Episode{};
  env.reset(rng, row.obs);
}

void reset_row(Env& env, Rng& rng, Episode& episode, const StepRow& row) {
  episode = Episode{};
  *row.reward = 0.0f;
  *row.terminated = *row.truncated = 0;
  env.reset(rng, row.obs);
}

}  // namespace tandem::envs
