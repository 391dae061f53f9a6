// GpuNormalizer: turns a feed's samples (uint8 or float32) and targets, already in GPU memory, into
// its batch: x_out = x * scale[c] + bias[c] (feed_options.hpp), the targets copied. One fused gather kernel where it is built
// (TANDEM_FEED_KERNEL, gather_kernel.hpp), index_select + to + mul/add otherwise. Used by HostFeed
// (rows staged one after another) and DeviceFeed (rows picked by an index from the split's copy).
// Only in builds whose LibTorch has CUDA.
//
// Threads: construction makes the normalisation's constants on `device`; apply() only enqueues work
// on `stream` (the caller's current stream on `device`, under a CUDAGuard for it) and never waits.
#pragma once

#include <cstdint>
#include <string_view>

#include "common/cuda.hpp"
#include "learner/feed/batch.hpp"
#include "learner/feed/feed_options.hpp"
#ifdef TANDEM_FEED_KERNEL
#include "learner/feed/gather_kernel.hpp"
#endif

namespace tandem::feed {

class GpuNormalizer {
 public:
  // `feed` names the feed in errors (UserError when the kernel cannot normalise that many channels).
  GpuNormalizer(std::string_view feed, const FeedLayout& layout, c10::DeviceIndex device);

  // Fills out.x and out.y (allocated, out.y.size(0) > 0 rows): row r is sample order[first + r] of x
  // and y, or sample r when `order` is undefined. x is the cache's [samples, sample shape...], y its
  // [samples, target shape...], order int64 on the GPU. `first` rather than a narrowed view keeps the kernel path free of
  // tensor bookkeeping: DeviceFeed calls this once per consumer per step.
  void apply(const torch::Tensor& x, const torch::Tensor& y, const torch::Tensor& order, std::int64_t first, Batch& out,
             cuda::StreamHandle stream) const;

 private:
#ifdef TANDEM_FEED_KERNEL
  bool x_float_;
  std::int64_t sample_elements_, y_bytes_;
  ChannelAffine affine_;
#else
  std::int64_t channels_, plane_;
  torch::Tensor scale_, bias_;  // [1, channels, 1] on the GPU
#endif
};

}  // namespace tandem::feed
