// _tandem._testing: what the pytest suite and `tandem bench python` need to check bytes (not API).
#include <torch/csrc/autograd/python_variable.h>  // before pybind11: the at::Tensor caster

#include <torch/torch.h>

#include "common/clock.hpp"
#include "common/error.hpp"
#include "python/bindings/module.hpp"
#include "shm/verify_pattern.hpp"

namespace tandem::python {
namespace {

std::byte* bytes_of(const at::Tensor& t) {
  if (!t.is_cpu() || t.scalar_type() != at::kByte || !t.is_contiguous())
    fail("need a contiguous uint8 CPU tensor, got {} {}", c10::toString(t.scalar_type()), t.device().str());
  return static_cast<std::byte*>(t.data_ptr());
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
}

}  // namespace tandem::python
