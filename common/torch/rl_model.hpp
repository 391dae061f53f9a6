// The actor-critic model of an RL job and the policy head that reads it. Rollout actors, RL
// evaluators and the RL learner all build it here, so they build the same network and the weight
// slab's signature matches across them.
//
//   const PolicyHead head = policy_head_for(env);
//   Model model = make_rl_model(settings.model, settings.rl, env);  // eval mode: the learner trains it
//   auto heads = model.forward_heads(obs.view(rl_model_input_shape(batch, model.spec())));
//
// The model is ModelSpec{model.name, channels, height, width = the env's observation shape (1 x 1 x
// obs_dim for a flat one; env_spec.hpp), num_classes =
// policy_head_for(env).params_dim(), seed = model.seed, gaussian_dims = action_dim of a continuous env,
// norm_obs = rl.norm_obs} on the CPU. Its forward_heads() must give {params [B, params_dim], value [B]
// or [B, 1]}: actor_critic_mlp and, for images, actor_critic_cnn do (a Gaussian's log-std a parameter,
// networks.cpp), a TorchScript file must return (params, value). A model that does not fit is a UserError naming the model and the env.
//
// Observation statistics (rl.norm_obs, actor_critic_mlp only): the model normalises what it is given
// by the running mean and variance in its buffers (obs_stats_of()). Only the RL learner writes them: it
// folds in each update's raw observations after that update (learner/rl/normalizers.hpp) and holds
// them fixed through the update's epochs. They travel as the weights do: the weight slab publishes
// them with every version (rollout actors and evaluators normalise with the version they act with) and
// checkpoints save and restore them. The rings carry raw observations.
//
// Threads: any thread; the Model is then used by one thread at a time.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "common/env_spec.hpp"
#include "common/settings/actor.hpp"
#include "common/settings/data.hpp"
#include "common/torch/models.hpp"
#include "common/torch/policy.hpp"

namespace tandem {

PolicyHead policy_head_for(const EnvSpec& env);

Model make_rl_model(const ModelSettings& model, const RlSettings& rl, const EnvSpec& env);

// The model's own observation statistics (its buffers, not copies), or nullopt without rl.norm_obs.
struct ObsStats {
  torch::Tensor mean, var;  // f32 [obs_dim]
  torch::Tensor count;      // f64 [1]: observations folded in, from gymnasium's 1e-4
};
std::optional<ObsStats> obs_stats_of(const Model& model);

// Observations [B, obs_dim] as the model takes them: [B, C, H, W] of its spec (B = -1: inferred).
inline std::vector<std::int64_t> rl_model_input_shape(std::int64_t batch, const ModelSpec& spec) {
  return {batch, spec.channels, spec.height, spec.width};
}

}  // namespace tandem
