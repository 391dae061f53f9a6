#include "actor/rl_setup.hpp"

#include "common/error.hpp"

namespace tandem::actor {
namespace {

// env.name values -> the ids make_env() knows.
std::string builtin_id(const std::string& name) {
  if (name == "cartpole") return "CartPole-v1";
  if (name == "acrobot") return "Acrobot-v1";
  if (name == "mountaincar") return "MountainCar-v0";
  if (name == "pendulum") return "Pendulum-v1";
  return name;  // "null", or anything else: make_env() names the choices
}

}  // namespace

EnvSource::EnvSource(const Config& config) {
  const std::string name = config.string("env.name");
  const std::string plugin = config.string("env.plugin");
  if (name == "plugin") {
    if (plugin.empty()) fail("config: env.name = \"plugin\" but env.plugin is empty: set it to your env's .so");
    plugin_ = envs::PluginLibrary::open(plugin);
  } else {
    builtin_ = builtin_id(name);
  }
  spec_ = make()->spec();
}

std::unique_ptr<envs::Env> EnvSource::make() const {
  if (plugin_) return envs::PluginEnv::create(plugin_, "", spec_);  // spec_ is empty (unchecked) the first time
  return envs::make_env(builtin_);
}

std::vector<std::unique_ptr<envs::Env>> EnvSource::make(int count) const {
  std::vector<std::unique_ptr<envs::Env>> out;
  out.reserve(static_cast<std::size_t>(count));
  for (int i = 0; i < count; ++i) out.push_back(make());
  return out;
}

}  // namespace tandem::actor
