// What the RL learner builds from the job's settings before it trains: the rings' shape for the env's
// spaces (envs/env_source.hpp). The settings' rules are JobSettings::parse's; the actor-critic model
// and its policy head come from common/torch/rl_model.hpp, which the actors use too.
//
// Threads: main's thread, at start.
#pragma once

#include <cstdint>

#include "common/settings/job.hpp"
#include "common/torch/policy.hpp"
#include "envs/env.hpp"
#include "shm/experience_ring_format.hpp"

namespace tandem::rl {

// One ring per rollout actor, T x E steps of the env's spaces.
shm::ExperienceShape experience_shape(const JobSettings& s, const envs::EnvSpec& env, const PolicyHead& head);

}  // namespace tandem::rl
