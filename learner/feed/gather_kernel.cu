#include <cuda_runtime.h>

#include <algorithm>

#include "learner/feed/gather_kernel.hpp"

namespace tandem::feed {
namespace {

__device__ __forceinline__ float affine_at(const ChannelAffine& a, std::uint8_t v, std::int64_t element) {
  const int c = a.channels == 1 ? 0 : static_cast<int>((element / a.plane) % a.channels);
  return static_cast<float>(v) * a.scale[c] + a.bias[c];
}

// kVector: four bytes in (uchar4), four floats out (float4), when sample_bytes % 4 == 0 and the
// pointers are aligned; otherwise one element per thread.
template <bool kVector>
__global__ void gather_normalize(GatherArgs args, ChannelAffine affine) {
  const std::int64_t width = kVector ? 4 : 1;
  const std::int64_t per_sample = args.sample_bytes / width;
  const std::int64_t total = args.n * per_sample;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  const std::int64_t first = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;

  for (std::int64_t i = first; i < total; i += stride) {
    const std::int64_t r = i / per_sample;
    const std::int64_t v = i - r * per_sample;
    const std::int64_t row = args.index != nullptr ? args.index[r] : r;
    const std::uint8_t* src = args.x + row * args.sample_bytes;
    float* dst = args.x_out + r * args.sample_bytes;
    if constexpr (kVector) {
      const uchar4 b = reinterpret_cast<const uchar4*>(src)[v];
      const std::int64_t e = v * 4;
      reinterpret_cast<float4*>(dst)[v] = make_float4(affine_at(affine, b.x, e), affine_at(affine, b.y, e + 1),
                                                      affine_at(affine, b.z, e + 2), affine_at(affine, b.w, e + 3));
    } else {
      dst[v] = affine_at(affine, src[v], v);
    }
  }
  if (args.y != nullptr)
    for (std::int64_t r = first; r < args.n; r += stride)
      args.y_out[r] = args.y[args.index != nullptr ? args.index[r] : r];
}

bool aligned(const void* p, std::uintptr_t alignment) { return reinterpret_cast<std::uintptr_t>(p) % alignment == 0; }

}  // namespace

void launch_gather_normalize(const GatherArgs& args, const ChannelAffine& affine, cuda::StreamHandle stream) {
  if (args.n == 0) return;
  const bool vector = args.sample_bytes % 4 == 0 && aligned(args.x, 4) && aligned(args.x_out, 16);
  const std::int64_t work = args.n * (vector ? args.sample_bytes / 4 : args.sample_bytes);
  constexpr int kThreads = 256;
  const int blocks = static_cast<int>(std::clamp<std::int64_t>((work + kThreads - 1) / kThreads, 1, 8192));
  if (vector) gather_normalize<true><<<blocks, kThreads, 0, stream>>>(args, affine);
  else gather_normalize<false><<<blocks, kThreads, 0, stream>>>(args, affine);
  TANDEM_CUDA_CHECK(cudaGetLastError());
}

}  // namespace tandem::feed
