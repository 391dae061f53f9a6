#include "envs/env_source.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <string_view>

#include "common/error.hpp"
#include "envs/python_env.hpp"

namespace tandem::envs {
namespace {

// env.name, make_env's name, Gymnasium's id of the env we follow ("" where none: Breakout is ours after
// MinAtar, null is ours). The MuJoCo tasks are ours after Gymnasium's -v5 (docs/ENVS.md).
struct Builtin {
  std::string_view name, id, gymnasium;
};
constexpr std::array<Builtin, 11> kBuiltin = {{
    {"cartpole", "CartPole-v1", "CartPole-v1"},
    {"acrobot", "Acrobot-v1", "Acrobot-v1"},
    {"mountaincar", "MountainCar-v0", "MountainCar-v0"},
    {"pendulum", "Pendulum-v1", "Pendulum-v1"},
    {"hopper", "Hopper", "Hopper-v5"},
    {"walker2d", "Walker2d", "Walker2d-v5"},
    {"halfcheetah", "HalfCheetah", "HalfCheetah-v5"},
    {"ant", "Ant", "Ant-v5"},
    {"humanoid", "Humanoid", "Humanoid-v5"},
    {"breakout", "Breakout", ""},
    {"null", "null", ""},
}};

bool same_ignoring_case(std::string_view a, std::string_view b) {
  const auto lower = [](char c) { return static_cast<char>(std::tolower(static_cast<unsigned char>(c))); };
  return a.size() == b.size() &&
         std::equal(a.begin(), a.end(), b.begin(), [&](char x, char y) { return lower(x) == lower(y); });
}

}  // namespace

std::string env_id(const EnvSettings& settings) {
  if (settings.name == "plugin" || settings.is_python()) return "";
  for (const Builtin& b : kBuiltin)
    if (b.name == settings.name) return std::string(b.id);
  std::string names;
  for (const Builtin& b : kBuiltin) names += fmt::format("{}, ", b.name);
  fail("config: env.name = \"{}\" is not one of: {}plugin, python", settings.name, names);
}

std::vector<std::string> builtin_env_names() {
  std::vector<std::string> out;
  out.reserve(std::size(kBuiltin));
  for (const Builtin& b : kBuiltin) out.emplace_back(b.name);
  return out;
}

std::optional<std::string> builtin_env_name(std::string_view spelling) {
  for (const Builtin& b : kBuiltin)
    if (same_ignoring_case(spelling, b.name) || same_ignoring_case(spelling, b.id) ||
        (!b.gymnasium.empty() && same_ignoring_case(spelling, b.gymnasium)))
      return std::string(b.name);
  return std::nullopt;
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
