#include "envs/env_source.hpp"

#include <fmt/format.h>

#include <array>
#include <string_view>
#include <utility>

#include "common/error.hpp"
#include "envs/python_env.hpp"

namespace tandem::envs {
namespace {

constexpr std::array<std::pair<std::string_view, std::string_view>, 10> kBuiltin = {{
    {"cartpole", "CartPole-v1"},
    {"acrobot", "Acrobot-v1"},
    {"mountaincar", "MountainCar-v0"},
    {"pendulum", "Pendulum-v1"},
    {"hopper", "Hopper"},
    {"walker2d", "Walker2d"},
    {"halfcheetah", "HalfCheetah"},
    {"ant", "Ant"},
    {"breakout", "Breakout"},
    {"null", "null"},
}};

}  // namespace

std::string env_id(const EnvSettings& settings) {
  if (settings.name == "plugin" || settings.is_python()) return "";
  for (const auto& [name, id] : kBuiltin)
    if (name == settings.name) return std::string(id);
  std::string names;
  for (const auto& [name, id] : kBuiltin) names += fmt::format("{}, ", name);
  fail("config: env.name = \"{}\" is not one of: {}plugin, python", settings.name, names);
}

void check_env(const EnvSettings& settings) {
  if (settings.is_python()) (void)python_env_spec(settings);
  else (void)env_id(settings);
}

EnvSource::EnvSource(const EnvSettings& settings) : builtin_(env_id(settings)), python_(settings.is_python()) {
  if (python_) {
    spec_ = python_env_spec(settings);
    return;
  }
  if (builtin_.empty()) plugin_ = PluginLibrary::open(settings.plugin);
  spec_ = make()->spec();
}

std::unique_ptr<Env> EnvSource::make() const {
  if (python_)
    fail(
        "env '{}' is written in Python: only the Python rollout actor steps it (an RL evaluator cannot): set "
        "actor.evaluators = 0",
        spec_.name);
  if (plugin_) return PluginEnv::create(plugin_, "", spec_);  // spec_ is empty (unchecked) the first time
  return make_env(builtin_);
}

std::vector<std::unique_ptr<Env>> EnvSource::make(int count) const {
  std::vector<std::unique_ptr<Env>> out;
  out.reserve(static_cast<std::size_t>(count));
  for (int i = 0; i < count; ++i) out.push_back(make());
  return out;
}

}  // namespace tandem::envs
