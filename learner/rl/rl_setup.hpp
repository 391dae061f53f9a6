// What the RL learner builds from the job's settings before it trains: the rings' shape and the
// actor-critic model for the env's spaces (envs/env_source.hpp). The settings' rules are
// JobSettings::parse's; a model that does not fit the env is one UserError line naming both.
//
// Threads: main's thread, at start.
#pragma once

#include <cstdint>

#include "common/settings/job.hpp"
#include "common/torch/models.hpp"
#include "common/torch/policy.hpp"
#include "envs/env.hpp"
#include "shm/experience_ring_format.hpp"

namespace tandem::rl {

PolicyHead policy_head_for(const envs::EnvSpec& env);

// One ring per rollout actor, T x E steps of the env's spaces.
shm::ExperienceShape experience_shape(const JobSettings& s, const envs::EnvSpec& env, const PolicyHead& head);

// model.name over observations [B, 1, 1, obs_dim] with head.params_dim() policy outputs and a value
// head; a model that does not fit (another output size, no value head) is a UserError naming the
// model and the env.
Model rl_model(const ModelSettings& settings, const envs::EnvSpec& env, const PolicyHead& head);

}  // namespace tandem::rl
