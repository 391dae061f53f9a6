#include "python/bindings/batch_reuse.hpp"

#include <torch/csrc/autograd/python_variable.h>  // before pybind11's casters: THPVariable_Unpack

#include <algorithm>

namespace tandem::python {
namespace {

bool no_weak_references(PyObject* obj) {
  // Kept for the process's life: a static py::object would be released after the interpreter is gone.
  static PyObject* const count = py::object(py::module_::import("_weakref").attr("getweakrefcount")).release().ptr();
  return py::reinterpret_borrow<py::object>(count)(py::handle(obj)).cast<Py_ssize_t>() == 0;
}

bool no_attributes(PyObject* obj) {
  PyObject** dict = _PyObject_GetDictPtr(obj);
  return dict == nullptr || *dict == nullptr || PyDict_GET_SIZE(*dict) == 0;
}

// Nothing but the cache can reach this tensor or its memory, and it is still a plain batch.
bool only_the_cache_holds(const py::object& obj) {
  if (Py_REFCNT(obj.ptr()) != 1) return false;
  const at::Tensor& t = THPVariable_Unpack(obj.ptr());
  // use_count: other tensors (C++ holders) sharing this TensorImpl; weak_use_count is 1 plus weak
  // references; a view is another TensorImpl over the same storage.
  return t.use_count() == 1 && t.weak_use_count() == 1 && t.storage().use_count() == 1 && !t.requires_grad() &&
         !t.grad().defined() && no_weak_references(obj.ptr()) && no_attributes(obj.ptr());
}

bool same_tensor(const torch::Tensor& t, const py::object& obj) {
  return t.unsafeGetTensorImpl() == THPVariable_Unpack(obj.ptr()).unsafeGetTensorImpl();
}

}  // namespace

std::vector<feed::Batch> ReusedBatches::offer(std::size_t consumers, std::uintptr_t stream) {
  offered_.assign(consumers, -1);
  std::vector<feed::Batch> refill(consumers);
  std::vector<bool> taken(entries_.size(), false);
  for (std::size_t c = 0; c < consumers; ++c)
    for (std::size_t i = 0; i < entries_.size(); ++i) {
      const Entry& e = entries_[i];
      if (taken[i] || e.stream != stream || !only_the_cache_holds(e.x) || !only_the_cache_holds(e.y)) continue;
      taken[i] = true;
      offered_[c] = static_cast<int>(i);
      refill[c] = {THPVariable_Unpack(e.x.ptr()), THPVariable_Unpack(e.y.ptr())};
      break;
    }
  return refill;
}

std::vector<py::tuple> ReusedBatches::hand_out(const feed::Step& step, std::uintptr_t stream) {
  std::vector<py::tuple> out;
  out.reserve(step.batches.size());
  for (std::size_t c = 0; c < step.batches.size(); ++c) {
    const feed::Batch& b = step.batches[c];
    const int offered = c < offered_.size() ? offered_[c] : -1;
    if (offered >= 0 && same_tensor(b.x, entries_[offered].x) && same_tensor(b.y, entries_[offered].y)) {
      out.push_back(py::make_tuple(entries_[offered].x, entries_[offered].y));
      continue;
    }
    Entry fresh{py::cast(b.x), py::cast(b.y), stream};
    out.push_back(py::make_tuple(fresh.x, fresh.y));
    if (entries_.size() < capacity_) {
      entries_.push_back(std::move(fresh));
    } else {
      // A free entry of other shapes (an epoch's short last step) or another stream gives its place up.
      const auto stale = std::find_if(entries_.begin(), entries_.end(), [](const Entry& e) {
        return only_the_cache_holds(e.x) && only_the_cache_holds(e.y);
      });
      if (stale != entries_.end()) *stale = std::move(fresh);
    }
  }
  offered_.clear();
  return out;
}

}  // namespace tandem::python
