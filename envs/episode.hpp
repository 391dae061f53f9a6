// What one env's step or reset writes under same-step auto-reset (vec_env.hpp states the contract): the
// one home of that rule, for VecEnv (a row per env) and AsyncVecEnv (a row per batch slot).
//
// Threads: whichever thread steps the env, with the env, its Rng, its Episode and the row to itself.
#pragma once

#include <cstdint>

#include "envs/env.hpp"

namespace tandem::envs {

// The episode in progress in one env.
struct Episode {
  double running_return = 0.0;
  std::int32_t running_length = 0;
};

// Where one step's results go: obs and final_obs point at obs_dim floats each.
struct StepRow {
  float* obs;
  float* final_obs;
  float* reward;
  std::uint8_t* terminated;
  std::uint8_t* truncated;
  double* episode_return;
  std::int32_t* episode_length;
};

// Steps `env` with `action`. Where the episode ends (the env terminates or truncates it, or it reaches
// max_episode_steps > 0), the last observation goes to final_obs, the episode's return and length to
// the row, and the env resets from `rng` into obs.
void step_with_autoreset(Env& env, Rng& rng, int max_episode_steps, Episode& episode, ActionRef action,
                         const StepRow& row);

// Resets `env` from `rng` into obs and forgets the episode in progress: reward 0, neither flag set.
void reset_row(Env& env, Rng& rng, Episode& episode, const StepRow& row);

}  // namespace tandem::envs
