// The actor-critic model of an RL job and the policy head that reads it. Rollout actors, RL
// evaluators and the RL learner all build it here, so they build the same network and the weight
// slab's signature matches across them.
//
//   const PolicyHead head = policy_head_for(env);
//   Model model = make_rl_model(settings.model, env);  // eval mode: the learner turns training on
//   auto heads = model.forward_heads(obs.view(rl_model_input_shape(batch, env.obs_dim)));
//
// The model is ModelSpec{model.name, channels = 1, height = 1, width = obs_dim, num_classes =
// policy_head_for(env).params_dim(), seed = model.seed} on the CPU. Its forward_heads() must give
// {params [B, params_dim], value [B] or [B, 1]}: actor_critic_mlp does, a TorchScript file must
// return (params, value). A model that does not fit is a UserError naming the model and the env.
//
// Threads: any thread; the Model is then used by one thread at a time.
#pragma once

#include <cstdint>
#include <vector>

#include "common/env_spec.hpp"
#include "common/settings/data.hpp"
#include "common/torch/models.hpp"
#include "common/torch/policy.hpp"

namespace tandem {

PolicyHead policy_head_for(const EnvSpec& env);

Model make_rl_model(const ModelSettings& settings, const EnvSpec& env);

// Observations [B, obs_dim] as the model takes them: [B, 1, 1, obs_dim] (B = -1: inferred).
inline std::vector<std::int64_t> rl_model_input_shape(std::int64_t batch, std::int64_t obs_dim) {
  return {batch, 1, 1, obs_dim};
}

}  // namespace tandem
