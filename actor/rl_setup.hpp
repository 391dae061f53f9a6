// What a rollout actor and an RL evaluator build the same way from a job config: the environments
// (env.name, or env.plugin through dlopen). The policy head and the model for their spec() come
// from common/torch/rl_model.hpp, which the RL learner uses too.
//
// Threads: an EnvSource may make envs from any thread; each env then belongs to one (envs/env.hpp).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/config.hpp"
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

}  // namespace tandem::actor
