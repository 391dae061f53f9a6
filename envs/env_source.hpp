// EnvSource: the environments a job's [env] table names, made as often as a process needs them: a
// built-in env by its env.name (the one map from env.name to the registry's Gymnasium ids is here),
// or the library env.plugin names, opened once. The RL learner reads the spaces from it, rollout
// actors and RL evaluators step what it makes, and the launcher checks env.name with env_id()
// before anything starts.
//
// Threads: an EnvSource may make envs from any thread; each env then belongs to one (env.hpp).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/settings/actor.hpp"
#include "envs/env.hpp"
#include "envs/plugin_env.hpp"

namespace tandem::envs {

// The make_env() name of env.name ("cartpole" -> "CartPole-v1"); "" for "plugin" and "python". Any
// other name is a UserError naming the choices.
std::string env_id(const EnvSettings& settings);

// The built-in envs' env.name values ("cartpole", ..., "null"), in the registry's order.
std::vector<std::string> builtin_env_names();

// The env.name of the built-in env `spelling` names, case-insensitively by its env.name, its make_env()
// name or the Gymnasium id of the env it follows ("Hopper", "hopper-v5", "CartPole-v1" -> "hopper",
// "hopper", "cartpole"); nullopt for any other text. tandem.envs.make takes these spellings; a job's
// config takes env.name exactly, as written (one spelling per env in every config and run record).
std::optional<std::string> builtin_env_name(std::string_view spelling);

// The launcher's check before anything starts: env.name exists, and a Python env imports and answers
// (envs/python_env.hpp).
void check_env(const EnvSettings& settings);

class EnvSource {
 public:
  // Opens env.plugin once (env.name = "plugin"), or asks a Python env for its spaces once.
  explicit EnvSource(const EnvSettings& settings);
  const EnvSpec& spec() const { return spec_; }
  // A UserError for a Python env: only the Python rollout actor steps it.
  std::unique_ptr<Env> make() const;
  std::vector<std::unique_ptr<Env>> make(int count) const;

 private:
  std::string builtin_;                    // make_env's name, when not a plugin
  std::shared_ptr<PluginLibrary> plugin_;  // when env.name = "plugin"
  bool python_ = false;                    // env.name = "python"
  EnvSpec spec_;
};

}  // namespace tandem::envs
