#include "learner/rl/rl_setup.hpp"

namespace tandem::rl {

shm::ExperienceShape experience_shape(const JobSettings& s, const envs::EnvSpec& env, const PolicyHead& head) {
  shm::ExperienceShape shape;
  shape.num_actors = s.rollout_actors;
  shape.slots_per_ring = s.rl.slots_per_ring;
  shape.steps = s.rl.rollout_steps;
  shape.envs = static_cast<std::uint32_t>(s.env.envs);
  shape.obs_dim = static_cast<std::uint32_t>(env.obs_dim);
  shape.action_kind = env.discrete() ? shm::ActionKind::discrete : shm::ActionKind::continuous;
  shape.action_dim = env.discrete() ? 1 : static_cast<std::uint32_t>(env.action_dim);
  shape.logits_dim = static_cast<std::uint32_t>(head.params_dim());
  return shape;
}

}  // namespace tandem::rl
