#include "python/bindings/env_io.hpp"

#include <fmt/ranges.h>
#include <pybind11/stl.h>
#include <unistd.h>

#include <filesystem>
#include <limits>
#include <system_error>
#include <vector>

#include "common/error.hpp"
#include "common/quote.hpp"
#include "envs/env_source.hpp"
#include "python/bindings/arguments.hpp"

namespace tandem::python {

using I = std::int64_t;

namespace {

// The env.name `name` spells (envs/env_source.hpp takes any case and the Gymnasium ids), or "plugin".
std::string env_name(const std::string& name) {
  if (name == "plugin") return name;
  if (name == "python")
    fail("tandem.envs.make name='python' names a Python env: step it from Python directly, not through tandem.envs");
  if (std::optional<std::string> builtin = envs::builtin_env_name(name)) return *builtin;
  fail(
      "tandem.envs.make name={} is not a built-in env: use one of {} (tandem.envs.names(); any case, or the "
      "Gymnasium id, e.g. 'CartPole-v1', 'Hopper-v5'), or name='plugin' with plugin='path/to/lib.so'",
      quote_cut(name), fmt::join(envs::builtin_env_names(), ", "));
}

// The launcher's settings refuse a plugin that is not a file in the config's words; this says it in
// make()'s. A NUL byte first: the file checks read a C string, cut at it.
std::string plugin_path(const std::string& plugin) {
  if (plugin.empty()) return plugin;
  if (plugin.find('\0') != std::string::npos)
    fail("tandem.envs.make plugin={} holds a NUL byte (a path is cut there): pass the path without it",
         quote_cut(plugin));
  std::error_code ec;
  if (!std::filesystem::is_regular_file(plugin, ec))
    fail("tandem.envs.make plugin={} is not a file: give the path of a shared library implementing envs/tandem_env.h",
         quote_cut(plugin));
  return plugin;
}

}  // namespace

EnvRequest env_request(const std::string& name, const std::string& plugin, py::handle num_envs, py::handle threads,
                       py::handle seed) {
  EnvRequest r;
  r.settings.name = env_name(name);
  r.settings.plugin = plugin_path(plugin);
  r.num_envs = integer_as<int>(num_envs, "tandem.envs.make num_envs", 1, EnvSettings::kMaxEnvs);
  r.threads = integer_as<int>(threads, "tandem.envs.make threads", 1, EnvSettings::kMaxThreads);
  if (r.threads > r.num_envs)
    fail("tandem.envs.make threads={} is more than num_envs={}: use threads 1..{}", r.threads, r.num_envs, r.num_envs);
  r.seed = integer_as<std::uint64_t>(seed, "tandem.envs.make seed");
  return r;
}

std::optional<std::uint64_t> reset_seed(py::handle seed) {
  if (seed.is_none()) return std::nullopt;
  return integer_as<std::uint64_t>(seed, "reset seed");
}

std::string described(const at::Tensor& t) {
  return fmt::format("{} ({}{})", c10::toString(t.scalar_type()), fmt::join(t.sizes(), ", "), t.dim() == 1 ? "," : "");
}

void require_strided(const at::Tensor& t, const char* what) {
  if (t.layout() != at::kStrided)
    fail(ErrorKind::shape, "{}: a sparse or other non-strided tensor ({} layout): pass a dense one ({}.to_dense())",
         what, c10::str(t.layout()), what);
}

at::Tensor checked_actions(const at::Tensor& actions, const EnvSpec& spec, I n) {
  require_strided(actions, "actions");
  if (actions.device().type() != c10::DeviceType::CPU)
    fail("actions on {}: pass them on the CPU (actions.cpu())", actions.device().str());
  if (spec.discrete()) {
    if (actions.dim() != 1 || actions.size(0) != n || at::isFloatingType(actions.scalar_type()))
      fail(ErrorKind::shape, "actions of {} for {} envs of {} actions: pass {} integers, one an env",
           described(actions), n, spec.num_actions, n);
    // Checked in int64, before the narrowing to int32 the engines read: 2**32 + 1 would step as 1.
    const at::Tensor wide = actions.to(torch::kLong);
    const auto bad = (wide < 0).logical_or(wide >= spec.num_actions);
    if (bad.any().item<bool>())
      fail(ErrorKind::shape, "action {} is out of range for env '{}': use 0..{}",
           wide.index({bad}).index({0}).item<std::int64_t>(), spec.name, spec.num_actions - 1);
    return wide.to(torch::kInt).contiguous();
  }
  const I dim = spec.action_dim;
  const bool shaped = (actions.dim() == 2 && actions.size(0) == n && actions.size(1) == dim) ||
                      (dim == 1 && actions.dim() == 1 && actions.size(0) == n);
  if (!shaped || !at::isFloatingType(actions.scalar_type()))
    fail(ErrorKind::shape, "actions of {} for {} envs of {} continuous dims: pass a float array of shape ({}, {})",
         described(actions), n, dim, n, dim);
  return actions.to(torch::kFloat).contiguous();
}

void OneCaller::check(const char* call) const {
  if (forked())
    fail(
        "{} in process {} on a tandem.envs env made in process {}: its stepping threads stayed in that process at "
        "fork(); make the env in the child (after fork), or start children with multiprocessing's 'spawn'",
        call, ::getpid(), made_in_);
  if (receiving_)
    fail("{} while another thread waits in recv() on this env: call an env from one thread at a time", call);
}

py::dict spaces_of(const EnvSpec& spec) {
  py::dict d;
  d["name"] = spec.name;
  d["obs_dim"] = spec.obs_dim;
  // Each arity of py::make_tuple is its own type in newer pybind11 (typing::Tuple<...>): no `?:`.
  if (spec.image()) d["obs_shape"] = py::make_tuple(spec.obs_channels, spec.obs_height, spec.obs_width());
  else d["obs_shape"] = py::make_tuple(spec.obs_dim);
  d["num_actions"] = spec.num_actions;
  d["action_dim"] = spec.action_dim;
  d["action_low"] = spec.action_low;
  d["action_high"] = spec.action_high;
  d["max_episode_steps"] = spec.max_episode_steps;
  // One bound a float; an env that declares none is unbounded (env_spec.hpp).
  const auto bounds = [&](const std::vector<float>& declared, float unbounded) {
    return declared.empty() ? std::vector<float>(static_cast<std::size_t>(spec.obs_dim), unbounded) : declared;
  };
  d["obs_low"] = bounds(spec.obs_low, -std::numeric_limits<float>::infinity());
  d["obs_high"] = bounds(spec.obs_high, std::numeric_limits<float>::infinity());
  return d;
}

}  // namespace tandem::python
