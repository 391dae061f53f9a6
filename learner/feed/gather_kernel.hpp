// One CUDA kernel that gathers uint8 samples by index, converts them to float, normalises them per
// channel and gathers their int64 labels: what index_select + to(float) + sub + div (+ index_select
// for the labels) do in five launches and five passes over memory, in one launch and one pass.
// Torch-free; built with nvcc (learner/meson.build) only where nvcc and LibTorch with CUDA exist,
// which defines TANDEM_FEED_KERNEL for the feeds. Enqueues on `stream`; never synchronizes.
#pragma once

#include <cstdint>

#include "common/cuda.hpp"

namespace tandem::feed {

inline constexpr int kMaxAffineChannels = 16;

// x_out = x * scale[c] + bias[c], channel c = (element / plane) % channels.
struct ChannelAffine {
  std::int32_t channels = 1;
  std::int64_t plane = 1;
  float scale[kMaxAffineChannels] = {};
  float bias[kMaxAffineChannels] = {};
};

struct GatherArgs {
  const std::uint8_t* x = nullptr;  // sample r at x + r * sample_bytes (device memory)
  std::int64_t sample_bytes = 0;
  const std::int64_t* y = nullptr;      // label r at y[r]; nullptr: no labels
  const std::int64_t* index = nullptr;  // rows to read (device memory); nullptr: rows 0..n-1
  std::int64_t n = 0;
  float* x_out = nullptr;         // n * sample_bytes floats
  std::int64_t* y_out = nullptr;  // n labels
};

void launch_gather_normalize(const GatherArgs& args, const ChannelAffine& affine, cuda::StreamHandle stream);

}  // namespace tandem::feed
