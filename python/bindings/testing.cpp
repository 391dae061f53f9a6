// _tandem._testing: what the pytest suite and `tandem bench python` need to check bytes (not API), and
// the C++ references Python mirrors are held to.
#include <torch/csrc/autograd/python_variable.h>  // before pybind11: the at::Tensor caster

#include <ATen/CPUGeneratorImpl.h>
#include <pybind11/stl.h>
#include <torch/types.h>

#include <algorithm>
#include <set>

#include "common/clock.hpp"
#include "common/error.hpp"
#include "common/torch/rl_model.hpp"
#include "envs/env_source.hpp"
#include "python/bindings/batch_reuse.hpp"
#include "python/bindings/module.hpp"
#include "python/bindings/tensors.hpp"
#include "shm/verify_pattern.hpp"

namespace tandem::python {
namespace {

std::byte* bytes_of(const at::Tensor& t) {
  if (!t.is_cpu() || t.scalar_type() != at::kByte || !t.is_contiguous())
    fail("need a contiguous uint8 CPU tensor, got {} {}", c10::toString(t.scalar_type()), t.device().str());
  return static_cast<std::byte*>(t.data_ptr());
}

// One policy step of the C++ rollout actor (actor/rollout.cpp, actor/rollout_loop.cpp) with `weights`:
// env's actor_critic_mlp (rl.norm_obs off, as the Python actor has it), its heads over `obs`, actions
// drawn from a CPU generator seeded `seed`. tandem.rollout_actor is held to it (test_rollout_policy.py).
py::dict rl_policy_step(const std::string& env, const NamedTensors& weights, const at::Tensor& obs,
                        std::uint64_t seed) {
  EnvSettings settings;
  settings.name = env;
  const EnvSpec spec = envs::EnvSource(settings).spec();
  Model model = make_rl_model(ModelSettings{.name = "actor_critic_mlp"}, RlSettings{}, spec);
  std::set<std::string> given;
  for (const auto& [name, tensor] : weights) given.insert(name);
  {
    torch::NoGradGuard no_grad;
    for (auto& [name, p] : model.named_parameters()) {
      const auto w = std::find_if(weights.begin(), weights.end(), [&](const auto& nt) { return nt.first == name; });
      if (w == weights.end()) fail("rl_policy_step: no weight {} for {}'s actor_critic_mlp", name, env);
      p.copy_(w->second);
      given.erase(name);
    }
  }
  if (!given.empty()) fail("rl_policy_step: {} is no parameter of {}'s actor_critic_mlp", *given.begin(), env);
  const PolicyHead head = policy_head_for(spec);
  const std::int64_t rows = obs.size(0);
  std::vector<torch::Tensor> heads = model.forward_heads(obs.reshape(rl_model_input_shape(rows, model.spec())));
  const torch::Tensor params = heads.at(0).reshape({rows, head.params_dim()}).to(torch::kFloat32);
  const ActionSample a = head.sample(params, at::make_generator<at::CPUGeneratorImpl>(seed));
  py::dict out;
  out["params"] = params.detach();
  out["values"] = heads.at(1).reshape({rows}).detach();
  out["actions"] = a.actions;
  out["log_probs"] = a.log_probs;
  return out;
}

}  // namespace

void bind_testing(py::module_& m) {
  py::module_ t = m.def_submodule("_testing", "byte-level helpers for tests and benchmarks");
  t.def(
      "fill_verify_pattern",
      [](const at::Tensor& flat, std::uint64_t version) {
    std::byte* p = bytes_of(flat);
    py::gil_scoped_release release;
    shm::fill_verify_pattern(p, static_cast<std::size_t>(flat.numel()), version);
      },
      py::arg("flat"), py::arg("version"), "docs/FORMAT.md 'Verify pattern' for `version` into a uint8 tensor");
  t.def(
      "check_verify_pattern",
      [](const at::Tensor& flat, std::uint64_t version) {
    const std::byte* p = bytes_of(flat);
    py::gil_scoped_release release;
    return shm::check_verify_pattern(p, static_cast<std::size_t>(flat.numel()), version);
      },
      py::arg("flat"), py::arg("version"));
  t.def(
      "storage_bytes",
      [](const at::Tensor& tensor) {
    // Every byte of the tensor's storage as one uint8 tensor: a flattened model's whole flat buffer.
    return torch::empty({0}, tensor.options().dtype(torch::kUInt8))
        .set_(tensor.storage(), 0, {static_cast<std::int64_t>(tensor.storage().nbytes())}, {1});
      },
      py::arg("tensor"));
  t.def("monotonic_ns", &monotonic_ns, "CLOCK_MONOTONIC as the slab's publish_ns stamps it");
  t.def("rl_policy_step", &rl_policy_step, py::arg("env"), py::arg("weights"), py::arg("obs"), py::arg("seed"),
        "the C++ rollout actor's policy step: {params, values, actions, log_probs}");

  // DeviceFeed's batch reuse (batch_reuse.hpp) over CPU tensors, so that its rules are tested with
  // every torch: step() stands in for PyDeviceFeed::take(), the "feed" filling each offered batch of
  // the right rows (else a new one, counted in `created`) with the step's number.
  struct FeedOutputs {
    ReusedBatches reuse;
    double steps = 0;
    int created = 0;
  };
  py::class_<FeedOutputs>(t, "ReusedBatches")
      .def(py::init([](std::size_t capacity) { return FeedOutputs{ReusedBatches(capacity)}; }), py::arg("capacity"))
      .def(
          "step",
          [](FeedOutputs& f, std::size_t consumers, std::uintptr_t stream, std::int64_t rows) {
    std::vector<feed::Batch> refill = f.reuse.offer(consumers, stream);
    feed::Step step;
    f.steps += 1;
    for (std::size_t c = 0; c < consumers; ++c) {
      const bool fits = c < refill.size() && refill[c].x.defined() && refill[c].x.size(0) == rows;
      f.created += fits ? 0 : 1;
      feed::Batch b = fits ? refill[c] : feed::Batch{torch::empty({rows, 2}), torch::empty({rows}, torch::kLong)};
      b.x.fill_(f.steps);
      b.y.fill_(f.steps);
      step.batches.push_back(std::move(b));
    }
    refill.clear();
    py::list out;
    for (auto& batch : f.reuse.hand_out(step, stream)) out.append(std::move(batch));
    return out;
          },
          py::arg("consumers"), py::arg("stream"), py::arg("rows"))
      .def_readonly("created", &FeedOutputs::created);
}

}  // namespace tandem::python
