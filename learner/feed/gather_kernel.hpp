// One CUDA kernel that gathers samples by index (uint8 or float32), converts them to float,
// normalises them per channel and gathers their targets: what index_select + to(float) + sub + div
// (+ index_select for the targets) do in five launches and five passes over memory, in one launch
// and one pass. Torch-free; built with nvcc (learner/meson.build) only where nvcc and LibTorch with
// CUDA exist, which defines TANDEM_FEED_KERNEL for the feeds. Enqueues on `stream`; never synchronizes.
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
  const void* x = nullptr;  // sample r at x + r * sample_elements elements (device memory)
  bool x_float = false;     // float32 elements, else uint8
  std::int64_t sample_elements = 0;
  const void* y = nullptr;              // target r at y + r * y_bytes; nullptr: no targets
  std::int64_t y_bytes = 0;             // per target, a multiple of 4 (int64 or float32 values)
  const std::int64_t* index = nullptr;  // rows to read (device memory); nullptr: rows 0..n-1
  std::int64_t n = 0;
  float* x_out = nullptr;  // n * sample_elements floats
  void* y_out = nullptr;   // n targets
};

void launch_gather_normalize(const GatherArgs& args, const ChannelAffine& affine, cuda::StreamHandle stream);

}  // namespace tandem::feed
