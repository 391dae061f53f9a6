// ReusedBatches: DeviceFeed's batches as Python sees them, refilled once Python has let go of them.
//
// Handing a step to Python wraps its two tensors per consumer in new Python objects, and the loop's
// next step frees both again: a large share of a C++ step (docs/results/HISTORY.md, "Python package:
// DeviceFeed"). Instead the binding keeps the objects it handed out and offers them back to the feed
// (DeviceFeed::next(refill)) once nothing but this cache refers to them: no other Python reference,
// weak reference or attribute, no C++ holder (an autograd graph, a container), no view of their
// memory, no gradient, and the same CUDA stream as when they were filled, the caching allocator's own
// rule for reusing freed memory. What Python still holds is never written again, so a loop sees the
// same batches a fresh allocation every step would give it.
//
// Threads: with the GIL held (it reads Python reference counts), on the feed's consumer thread.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <vector>

#include "learner/feed/batch.hpp"

namespace tandem::python {

namespace py = pybind11;

class ReusedBatches {
 public:
  explicit ReusedBatches(std::size_t capacity) : capacity_(capacity) {}

  // For a step of `consumers` batches on `stream`: a free cached batch per consumer where there is
  // one (undefined tensors where not), to pass to DeviceFeed::next(refill).
  std::vector<feed::Batch> offer(std::size_t consumers, std::uintptr_t stream);

  // The step's batches as (x, y) tuples: the cached objects where the feed refilled what offer() gave
  // it, new ones otherwise, which are kept for later steps while there is room (or in place of a free
  // entry of other shapes or another stream).
  std::vector<py::tuple> hand_out(const feed::Step& step, std::uintptr_t stream);

 private:
  struct Entry {
    py::object x, y;
    std::uintptr_t stream;
  };

  std::size_t capacity_;
  std::vector<Entry> entries_;
  std::vector<int> offered_;  // per consumer of the step under way: the entry offered, or -1
};

}  // namespace tandem::python
