// DeviceFeed: batches gathered on the GPU from a copy of the split that lives in GPU memory.
//
// The split's samples and targets (feed_options.hpp) are copied to GPU `device_index` once per process and
// GPU (feeds over the same cache, split and GPU share the copy). Each epoch's order comes from the
// same EpochSampler as HostFeed's (so both feeds visit the same samples in the same order) and is
// uploaded once per epoch, without a host sync; the next epoch's order is computed on a helper
// thread meanwhile. Each next() gathers batch_size * consumers samples by index, converts them to
// float and normalises them in one kernel per consumer (index_select + to + sub/div where the
// kernel is not built), into allocations that share no storage. next() only enqueues work on the
// caller's current CUDA stream and never waits for the GPU.
//
// Threads: one thread calls next(), always with the same current stream (the allocator reuses the
// epoch's index memory in that stream's order). Destruction waits for that stream. Without a GPU,
// or in a build whose LibTorch has no CUDA, construction fails with a UserError saying so.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "learner/feed/batch.hpp"
#include "learner/feed/feed_options.hpp"

namespace tandem::feed {

class DeviceFeed {
 public:
  DeviceFeed(const shm::DatasetCache& cache, const FeedOptions& options, std::uint64_t first_epoch = 0);
  ~DeviceFeed();
  DeviceFeed(DeviceFeed&&) noexcept;
  DeviceFeed& operator=(DeviceFeed&&) noexcept;

  std::uint64_t length() const;  // steps per epoch
  const EpochSampler& sampler() const;

  Step next();

  // next(), filling refill[c] for consumer c in place of a new allocation where it has exactly that
  // batch's shapes and dtypes (contiguous, on this GPU); the Step then holds those same tensors. The
  // caller vouches that nothing else uses them any more and that the current stream is the one they
  // were last filled on (current_stream()), as the caching allocator would for freed memory: the
  // Python binding hands back batches Python has dropped this way (python/bindings/feeds.cpp).
  Step next(const std::vector<Batch>& refill);

  // The current CUDA stream of the feed's GPU, as an opaque id (0 without CUDA).
  std::uintptr_t current_stream() const;

  // For a training step captured in a CUDA graph (learner/captured_train_step.hpp), which gathers from a fixed
  // index buffer. next_rows() advances exactly like next() but, instead of gathering, copies the
  // step's rows (batch_size * consumers int64 row numbers, split-relative) into `rows`, a fixed int64
  // tensor on the feed's GPU, with one D2D copy on the current stream; the Step it returns has no
  // batches. gather() fills out.x / out.y (allocated, one row per entry of `rows`) from the split's
  // copy: only kernels on the current stream, no allocation on the kernel path, no wait, so it may be
  // captured. Steps must be full (drop_last): a short step is a UserError.
  Step next_rows(const torch::Tensor& rows);
  void gather(const torch::Tensor& rows, Batch& out) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tandem::feed
