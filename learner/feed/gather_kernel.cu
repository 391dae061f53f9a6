#include <cuda_runtime.h>

#include <algorithm>
#include <type_traits>

#include "learner/feed/gather_kernel.hpp"

namespace tandem::feed {
namespace {

template <typename In>
__device__ __forceinline__ float affine_at(const ChannelAffine& a, In v, std::int64_t element) {
  const int c = a.channels == 1 ? 0 : static_cast<int>((element / a.plane) % a.channels);
  return static_cast<float>(v) * a.scale[c] + a.bias[c];
}

// Four elements in (uchar4 or float4), four floats out (float4).
template <typename In>
using Vector4 = std::conditional_t<std::is_same_v<In, float>, float4, uchar4>;

// kVector: four elements per thread, when sample_elements % 4 == 0 and the pointers are aligned;
// otherwise one element per thread.
template <typename In, bool kVector>
__global__ void gather_normalize(GatherArgs args, ChannelAffine affine) {
  const std::int64_t width = kVector ? 4 : 1;
  const std::int64_t per_sample = args.sample_elements / width;
  const std::int64_t total = args.n * per_sample;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  const std::int64_t first = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (std::int64_t i = first; i < total; i += stride) {
    const std::int64_t r = i / per_sample;
    const std::int64_t v = i - r * per_sample;
    const std::int64_t row = args.index != nullptr ? args.index[r] : r;
    const In* src = static_cast<const In*>(args.x) + row * args.sample_elements;
    float* dst = args.x_out + r * args.sample_elements;
    if constexpr (kVector) {
      const Vector4<In> b = reinterpret_cast<const Vector4<In>*>(src)[v];
      const std::int64_t e = v * 4;
      reinterpret_cast<float4*>(dst)[v] = make_float4(affine_at(affine, b.x, e), affine_at(affine, b.y, e + 1),
                                                      affine_at(affine, b.z, e + 2), affine_at(affine, b.w, e + 3));
    } else {
      dst[v] = affine_at(affine, src[v], v);
    }
  }
  if (args.y != nullptr) {  // the targets, 4 bytes at a time
    const std::int64_t words = args.y_bytes / 4;
    const auto* y = static_cast<const std::uint32_t*>(args.y);
    auto* y_out = static_cast<std::uint32_t*>(args.y_out);
    for (std::int64_t i = first; i < args.n * words; i += stride) {
      const std::int64_t r = i / words;
      y_out[i] = y[(args.index != nullptr ? args.index[r] : r) * words + (i - r * words)];
    }
  }
}

bool aligned(const void* p, std::uintptr_t alignment) { return reinterpret_cast<std::uintptr_t>(p) % alignment == 0; }

template <typename In>
void launch(const GatherArgs& args, const ChannelAffine& affine, cudaStream_t stream) {
  const bool vector = args.sample_elements % 4 == 0 && aligned(args.x, 4 * sizeof(In)) && aligned(args.x_out, 16);
  const std::int64_t work = std::max(args.n * (vector ? args.sample_elements / 4 : args.sample_elements),
                                     args.n * args.y_bytes / 4);
  constexpr int kThreads = 256;
  const int blocks = static_cast<int>(std::clamp<std::int64_t>((work + kThreads - 1) / kThreads, 1, 8192));
  if (vector) gather_normalize<In, true><<<blocks, kThreads, 0, stream>>>(args, affine);
  else gather_normalize<In, false><<<blocks, kThreads, 0, stream>>>(args, affine);
}

}  // namespace

void launch_gather_normalize(const GatherArgs& args, const ChannelAffine& affine, cuda::StreamHandle stream) {
  if (args.n == 0) return;
  if (args.x_float) launch<float>(args, affine, stream);
  else launch<std::uint8_t>(args, affine, stream);
  TANDEM_CUDA_CHECK(cudaGetLastError());
}

}  // namespace tandem::feed
