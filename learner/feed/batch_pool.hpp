// BatchPool: output batches a feed refills instead of allocating new ones, once their consumer has
// let go of them.
//
// A feed that makes a fresh batch every step pays for two allocations per consumer, and from Python
// for two new tensor objects as well (torch keeps a tensor's Python object alive while C++ still holds
// the tensor, so a refilled batch goes back to Python as the same objects). Refilling is safe exactly
// when the caching allocator would hand the memory back: nothing else holds the tensors, their
// storages or a view of them, and the refill runs on the stream the batch was made on, after
// everything the consumer enqueued there. A batch the consumer still holds is never touched: it gets a
// new one, as without the pool.
//
// Threads: one thread, the feed's caller. Owns up to `capacity` batches for its own lifetime.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "learner/feed/batch.hpp"

namespace tandem::feed {

class BatchPool {
 public:
  explicit BatchPool(std::size_t capacity) : capacity_(capacity) {}

  // A batch of these shapes and options, for work enqueued on `stream` (an opaque stream identity):
  // a pooled one nobody else holds, else a new one, kept while the pool has room, or in place of a
  // free one of other shapes or another stream.
  Batch take(at::IntArrayRef x_shape, const torch::TensorOptions& x_options, at::IntArrayRef y_shape,
             const torch::TensorOptions& y_options, std::uintptr_t stream);

  std::size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    Batch batch;
    std::uintptr_t stream;
  };

  std::size_t capacity_;
  std::vector<Entry> entries_;
};

}  // namespace tandem::feed
