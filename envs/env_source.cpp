#include "envs/env_source.hpp"

#include <fmt/format.h>

#include <array>
#include <string_view>
#include <utility>

#include "common/error.hpp"

namespace tandem::envs {
namespace {

constexpr std::array<std::pair<std::string_view, std::string_view>, 5> kBuiltin = {{
    {"cartpole", "CartPole-v1"},
    {"acrobot", "Acrobot-v1"},
    {"mountaincar", "MountainCar-v0"},
    {"pendulum", "Pendulum-v1"},
    {"null", "null"},
}};

}  // namespace

std::string env_id(const EnvSettings& settings) {
  if (settings.name == "plugin") return "";
  for (const auto& [name, id] : kBuiltin)
    if (name == settings.name) return std::string(id);
  std::string names;
  for (const auto& [name, id] : kBuiltin) names += fmt::format("{}, ", name);
  fail("config: env.name = \"{}\" is not one of: {}plugin", settings.name, names);
}

EnvSource::EnvSource(const EnvSettings& settings) : builtin_(env_id(settings)) {
  if (builtin_.empty()) plugin_ = PluginLibrary::open(settings.plugin);
  spec_ = make()->spec();
}

std::unique_ptr<Env> EnvSource::make() const {
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
