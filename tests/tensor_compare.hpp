// How the LibTorch tests compare tensors: the relative L2 distance, computed in float64 (so a bf16 or
// float32 result is judged by its own rounding, not the comparison's), the channels-last copy the
// GPU paths take, and the GPU the GPU tests run on.
#pragma once

#include <torch/types.h>

namespace tandem::testing {

inline double relative_l2(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kDouble) - b.to(torch::kDouble)).norm().item<double>() /
         b.to(torch::kDouble).norm().item<double>();
}

inline const torch::Device kGpu(torch::kCUDA, 0);

inline torch::Tensor channels_last(const torch::Tensor& t) { return t.contiguous(at::MemoryFormat::ChannelsLast); }

}  // namespace tandem::testing
