#include "python/bindings/env_io.hpp"

#include <fmt/ranges.h>

#include "common/error.hpp"
#include "python/bindings/arguments.hpp"

namespace tandem::python {

using I = std::int64_t;

EnvRequest env_request(const std::string& name, const std::string& plugin, py::handle num_envs, py::handle threads,
                       py::handle seed) {
  EnvRequest r;
  r.settings.name = name;
  r.settings.plugin = plugin;
  if (r.settings.is_python())
    fail("env.name = \"python\" names a Python env: step it from Python directly, not through tandem.envs");
  r.num_envs = integer_as<int>(num_envs, "num_envs", 1, 65536);
  r.threads = integer_as<int>(threads, "threads", 1, 1024);
  if (r.threads > r.num_envs)
    fail("threads={} is more than num_envs={}: use threads 1..{}", r.threads, r.num_envs, r.num_envs);
  r.seed = integer_as<std::uint64_t>(seed, "seed");
  return r;
}

std::optional<std::uint64_t> reset_seed(py::handle seed) {
  if (seed.is_none()) return std::nullopt;
  return integer_as<std::uint64_t>(seed, "reset seed");
}

std::string described(const at::Tensor& t) {
  return fmt::format("{} ({}{})", c10::toString(t.scalar_type()), fmt::join(t.sizes(), ", "), t.dim() == 1 ? "," : "");
}

at::Tensor checked_actions(const at::Tensor& actions, const EnvSpec& spec, I n) {
  if (actions.device().type() != c10::DeviceType::CPU)
    fail("actions on {}: pass them on the CPU (actions.cpu())", actions.device().str());
  if (spec.discrete()) {
    if (actions.dim() != 1 || actions.size(0) != n || at::isFloatingType(actions.scalar_type()))
      fail(ErrorKind::shape, "actions of {} for {} envs of {} actions: pass {} integers, one an env",
           described(actions), n, spec.num_actions, n);
    at::Tensor a = actions.to(torch::kInt).contiguous();
    const auto bad = (a < 0).logical_or(a >= spec.num_actions);
    if (bad.any().item<bool>())
      fail(ErrorKind::shape, "action {} is out of range for env '{}': use 0..{}", a.index({bad}).index({0}).item<int>(),
           spec.name, spec.num_actions - 1);
    return a;
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
  if (receiving_)
    fail("{} while another thread waits in recv() on this env: call an env from one thread at a time", call);
}

py::dict spaces_of(const EnvSpec& spec) {
  py::dict d;
  d["name"] = spec.name;
  d["obs_dim"] = spec.obs_dim;
  // Each arity of py::make_tuple is its own type in newer pybind11 (typing::Tuple<...>): no `?:`.
  if (spec.image())
    d["obs_shape"] = py::make_tuple(spec.obs_channels, spec.obs_height, spec.obs_width());
  else
    d["obs_shape"] = py::make_tuple(spec.obs_dim);
  d["num_actions"] = spec.num_actions;
  d["action_dim"] = spec.action_dim;
  d["action_low"] = spec.action_low;
  d["action_high"] = spec.action_high;
  d["max_episode_steps"] = spec.max_episode_steps;
  return d;
}

}  // namespace tandem::python
