// What a rollout actor and an RL evaluator build the same way from a job's settings: the policy head
// that reads the model's output for the env's action space (envs/env_source.hpp makes the envs), and
// the actor-critic model with the observation as its input.
//
// The model: ModelSpec{model.name, channels = 1, height = 1, width = obs_dim, num_classes =
// PolicyHead::params_dim(), seed = model.seed}; the RL learner builds the same one, so the weight
// slab's signature matches. Its forward_heads() must give {params [B, params_dim], value [B] or
// [B, 1]}: actor_critic_mlp does, a TorchScript file must return (params, value).
//
#pragma once

#include <cstdint>
#include <vector>

#include "common/settings/data.hpp"
#include "common/torch/models.hpp"
#include "common/torch/policy.hpp"
#include "envs/env.hpp"

namespace tandem::actor {

PolicyHead policy_head_for(const envs::EnvSpec& spec);

// Builds model.name for this env (CPU, eval mode) and checks that it has a value head.
Model make_rl_model(const ModelSettings& settings, const envs::EnvSpec& spec);

// Observations [B, obs_dim] as the model takes them: [B, 1, 1, obs_dim].
inline std::vector<std::int64_t> model_input_shape(std::int64_t batch, int obs_dim) { return {batch, 1, 1, obs_dim}; }

}  // namespace tandem::actor
