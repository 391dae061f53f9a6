// What HostFeed and DeviceFeed are asked for, and what they find in the cache. Torch-free.
//
// A feed reads a split of a dataset cache (shm/dataset_cache.hpp) whose field "x" is uint8 or float32
// samples (C,H,W or any shape; the first dimension is the channel when there are two or more) and
// whose field "y" is int64 or float32, one value or one array per sample (a class label, or a
// regression target). It hands out steps; a step is one batch for each of `consumers` consumers
// (batch_size samples each, drawn together as one sampler batch of batch_size * consumers), every
// batch in its own allocation. x arrives as float32, y as it is in the cache:
//   x_out = (x / 255 - mean[c]) / stddev[c]      uint8 x (one mean/stddev for all channels, or one per channel)
//   x_out = (x - mean[c]) / stddev[c]            float32 x
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "learner/feed/epoch_sampler.hpp"

namespace tandem::shm {
class DatasetCache;
}

namespace tandem::feed {

enum class Placement { automatic, cpu, cuda };  // automatic: the GPU `device_index` if one is visible

// HostFeed's bounds on its staging ring and gather threads: each staging slot holds a whole step, so
// an unbounded count is an allocation that cannot succeed rather than a faster feed.
inline constexpr unsigned kMaxStagingSlots = 64;
inline constexpr unsigned kMaxFeedWorkers = 256;

struct FeedOptions {
  std::string split = "train";
  std::uint64_t batch_size = 256;  // samples per consumer per step
  std::uint32_t consumers = 1;     // batches per step, each in its own allocation
  std::uint32_t rank = 0;
  std::uint32_t world_size = 1;
  std::uint64_t seed = 0;
  std::uint32_t device_index = 0;  // the GPU used, and the per-device seed (seed + PRIME * index)
  bool drop_last = false;          // drop the epoch's last, short step
  std::vector<float> mean{0.0f};
  std::vector<float> stddev{1.0f};
  // HostFeed only
  Placement placement = Placement::automatic;
  unsigned workers = 0;        // gather threads; 0: min(8, hardware threads)
  unsigned ring_slots = 4;     // staging slots (each holds one step)
  unsigned copy_delay_us = 0;  // testing: stall the copy stream this long before each H2D copy
};

// The cache, checked against the options: where the bytes are and how to convert them.
struct FeedLayout {
  std::string dataset;
  const std::byte* x = nullptr;  // sample i at x + i * x_stride
  bool x_float = false;          // float32 elements, else uint8
  std::uint64_t x_stride = 0;    // bytes per sample
  std::uint64_t x_elements = 0;  // elements per sample (of x in the cache, and of the float32 batch)
  std::vector<std::int64_t> sample_shape;
  const std::byte* y = nullptr;  // target i at y + i * y_stride
  bool y_float = false;          // float32, else int64
  std::uint64_t y_stride = sizeof(std::int64_t);
  std::vector<std::int64_t> y_shape;  // per sample; empty: one value
  std::uint64_t begin = 0, end = 0;   // the split
  std::uint32_t channels = 1;         // of the normalisation: 1 (shared mean/stddev) or shape[0]
  std::uint64_t plane = 0;            // elements per channel = x_elements / channels
  std::vector<float> scale, bias;     // per normalisation channel: x_out = x * scale + bias

  SamplerOptions sampler(const FeedOptions& options) const;
  std::uint64_t sample_bytes() const { return x_stride + y_stride; }     // read per sample
  std::vector<std::int64_t> batch_shape(std::uint64_t samples) const;    // {samples, sample_shape...}
  std::vector<std::int64_t> y_batch_shape(std::uint64_t samples) const;  // {samples, y_shape...}
};

// Validates (UserError naming the bad option or field and the fix) and describes the feed's input.
FeedLayout describe_feed(const shm::DatasetCache& cache, const FeedOptions& options);

// The sampler of a feed, refusing an epoch with no step: a rank must get at least one.
EpochSampler make_feed_sampler(const FeedLayout& layout, const FeedOptions& options);

}  // namespace tandem::feed
