// Uninitialized device bytes for one call's workspace (a cuDNN plan's, a kernel's partial sums),
// on the device of the tensor named: ATen's caching allocator makes this a free-list pop, and
// inside a CUDA-graph capture a stable address the graph reuses on every replay. At least one
// byte, so that a call wanting none still gets a valid pointer to ignore.
// Threads: any; the memory is ordered on the current CUDA stream.
#pragma once

#include <torch/types.h>

#include <algorithm>
#include <cstdint>

namespace tandem {

inline torch::Tensor scratch_bytes(std::int64_t bytes, const torch::Tensor& on) {
  return torch::empty({std::max<std::int64_t>(bytes, 1)}, on.options().dtype(torch::kUInt8));
}

}  // namespace tandem
