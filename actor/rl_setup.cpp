#include "actor/rl_setup.hpp"

#include <torch/torch.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/error.hpp"

namespace tandem::actor {

PolicyHead policy_head_for(const envs::EnvSpec& spec) {
  return spec.discrete() ? PolicyHead::discrete(spec.num_actions) : PolicyHead::continuous(spec.action_dim);
}

Model make_rl_model(const ModelSettings& settings, const envs::EnvSpec& spec) {
  const PolicyHead head = policy_head_for(spec);
  Model model = Model::create({.name = settings.name, .channels = 1, .height = 1, .width = spec.obs_dim,
                               .num_classes = head.params_dim(), .seed = settings.seed});
  model.eval();
  torch::NoGradGuard no_grad;
  const auto heads = model.forward_heads(torch::zeros(model_input_shape(2, spec.obs_dim)));
  if (heads.size() < 2 || heads[1].numel() != 2)
    fail("model '{}' gives {} for env '{}': an RL policy must return (params [B, {}], value [B]); use "
         "actor_critic_mlp or a TorchScript actor-critic",
         settings.name,
         heads.size() < 2 ? std::string("no value head")
                          : fmt::format("a value of shape [{}] for 2 observations", fmt::join(heads[1].sizes(), ", ")),
         spec.name, head.params_dim());
  return model;
}

}  // namespace tandem::actor
