// What a rollout actor and an RL evaluator build the same way from a job config: the environments
// (env.name, or env.plugin through dlopen), the policy head that reads the model's output for that
// env's action space, and the actor-critic model with the observation as its input.
//
// The model: ModelSpec{model.name, channels = 1, height = 1, width = obs_dim, num_classes =
// PolicyHead::params_dim(), seed = model.seed}; the RL learner builds the same one, so the weight
// slab's signature matches. Its forward_heads() must give {params [B, params_dim], value [B] or
// [B, 1]}: actor_critic_mlp does, a TorchScript file must return (params, value).
//
// Threads: an EnvSource may make envs from any thread; each env then belongs to one (envs/env.hpp).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/config.hpp"
#include "common/torch/models.hpp"
#include "common/torch/policy.hpp"
#include "envs/env.hpp"
#include "envs/plugin_env.hpp"

namespace tandem::actor {

class EnvSource {
 public:
  explicit EnvSource(const Config& config);  // opens env.plugin once, when env.name = "plugin"
  const envs::EnvSpec& spec() const { return spec_; }
  std::unique_ptr<envs::Env> make() const;
  std::vector<std::unique_ptr<envs::Env>> make(int count) const;

 private:
  std::string builtin_;                           // make_env's name, when not a plugin
  std::shared_ptr<envs::PluginLibrary> plugin_;   // when env.name = "plugin"
  envs::EnvSpec spec_;
};

PolicyHead policy_head_for(const envs::EnvSpec& spec);

// Builds model.name for this env (CPU, eval mode) and checks that it has a value head.
Model make_rl_model(const Config& config, const envs::EnvSpec& spec);

// Observations [B, obs_dim] as the model takes them: [B, 1, 1, obs_dim].
inline std::vector<std::int64_t> model_input_shape(std::int64_t batch, int obs_dim) { return {batch, 1, 1, obs_dim}; }

}  // namespace tandem::actor
