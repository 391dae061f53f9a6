// What the RL learner reads from the job config before it trains: the [rl] settings, the env's spaces
// (built-in or plugin), how many rollout rings there are and the rings' shape. The actor-critic model
// and its policy head come from common/torch/rl_model.hpp, which the actors use too.
// Every bad combination is one UserError line naming the keys and the fix.
//
// Threads: main's thread, at start.
#pragma once

#include <cstdint>
#include <string>

#include "common/config.hpp"
#include "common/torch/policy.hpp"
#include "envs/env.hpp"
#include "shm/experience_ring_format.hpp"

namespace tandem::rl {

struct RlSettings {
  std::string algo;                  // ppo | vtrace
  std::uint32_t rollout_actors = 1;  // R: one ring each
  std::uint32_t steps = 64;          // T
  std::uint32_t envs = 8;            // E
  std::uint32_t slots_per_ring = 4;
  std::uint32_t slots_per_update = 1;
  std::uint64_t total_env_steps = 1000000;
  bool stop_on_return = false;
  double stop_return = 475;
  double gamma = 0.99, gae_lambda = 0.95;
  std::int64_t update_epochs = 4, minibatches = 4;
  double clip_coef = 0.2;
  bool clip_value = true, norm_adv = true;
  double ent_coef = 0.01, vf_coef = 0.5, max_grad_norm = 0.5;
  double rho_bar = 1.0, c_bar = 1.0;
  bool anneal_lr = true;
  double lr = 2.5e-4;
  bool deterministic = false;        // consume k = slots_per_update / R slots per actor, round robin
  std::uint32_t slots_per_actor = 0; // k, deterministic mode only
};

// The rollout rings: $TANDEM_ACTORS minus actor.evaluators under `tandem run`, else 1.
std::uint32_t rollout_actor_count(const Config& config);

// Reads and checks the settings (rings too small to hold an update, an indivisible deterministic
// batch, no rollout actor, minibatches larger than the batch).
RlSettings rl_settings(const Config& config);

// The spaces of env.name (or of the library env.plugin names, loaded and created once).
envs::EnvSpec env_spec_for(const Config& config);

// One ring per rollout actor, T x E steps of the env's spaces.
shm::ExperienceShape experience_shape(const RlSettings& s, const envs::EnvSpec& env, const PolicyHead& head);

}  // namespace tandem::rl
