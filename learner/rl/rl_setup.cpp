#include "learner/rl/rl_setup.hpp"

#include <torch/torch.h>

#include "common/error.hpp"

namespace tandem::rl {

PolicyHead policy_head_for(const envs::EnvSpec& env) {
  return env.discrete() ? PolicyHead::discrete(env.num_actions) : PolicyHead::continuous(env.action_dim);
}

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

Model rl_model(const ModelSettings& settings, const envs::EnvSpec& env, const PolicyHead& head) {
  const ModelSpec spec{.name = settings.name, .channels = 1, .height = 1, .width = env.obs_dim,
                       .num_classes = head.params_dim(), .seed = settings.seed};
  const std::string needs = fmt::format(
      "env '{}' needs {} policy outputs ({}) and a value head", env.name, head.params_dim(),
      env.discrete() ? fmt::format("{} action logits", env.num_actions)
                     : fmt::format("mean and log-std of {} action dimensions", env.action_dim));
  std::optional<Model> model;
  try {
    model.emplace(Model::create(spec));
  } catch (const UserError& e) {
    fail("model '{}' does not fit: {}; {}: use actor_critic_mlp or a model with that head", spec.name, e.what(),
         needs);
  }
  torch::NoGradGuard no_grad;
  model->eval();
  const auto out = model->forward_heads(torch::zeros({2, 1, 1, env.obs_dim}));
  model->train(true);
  if (out.size() < 2 || out[1].numel() != 2)
    fail("model '{}' has no value head (it returns {} output{} per sample, not policy and value); {}: use "
         "actor_critic_mlp", spec.name, out.size(), out.size() == 1 ? "" : "s", needs);
  return std::move(*model);
}

}  // namespace tandem::rl
