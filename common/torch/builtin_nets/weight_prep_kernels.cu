#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <type_traits>

#include "common/torch/builtin_nets/float_convert.cuh"
#include "common/torch/builtin_nets/weight_prep_kernels.hpp"

namespace tandem::weight_prep_kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kJobsPerLaunch = 32;  // keeps the kernel's parameters well under CUDA's 4 KB
// A channel's slab is staged in shared memory up to 48 KB, what a launch gets without opting in.
constexpr int kStagedFloats = 48 * 1024 / sizeof(float);

struct Job {
  const void* src;
  void* dst;
  int out_channels, in_channels, kernel_area;
  int first_block;  // this job's blocks (one per output channel) are [first_block, next job's first_block)
  const float *gamma, *var;
  float eps;
};

struct Jobs {
  Job job[kJobsPerLaunch];
  int count;
};

using gpu::from_float;
using gpu::to_float;

// Where element k of a channel's [K, I] order sits in its [I, K] order.
__device__ __forceinline__ int ik_of_ki(int k, int in_channels, int kernel_area) {
  const int kk = k / in_channels, i = k - kk * in_channels;
  return i * kernel_area + kk;
}

// One block per output channel: the channel's [I, K] slab (or [K, I] back) is a small matrix to
// transpose. Global memory is read and written in order (coalesced) and the transposing side goes
// through shared memory, at a stride of K between neighbouring threads (conflict-free for odd K,
// 3x3's 9). Reading the source strided from global memory instead ran at a third of the copy
// bandwidth (docs/results/HISTORY.md, "Our kernels"). A slab beyond kStagedFloats goes strided
// through global memory, the way that still fits.
template <typename Src, typename Dst, bool kToChannelsLast>
__global__ void __launch_bounds__(kThreads) convert(Jobs jobs) {
  extern __shared__ float slab[];
  int j = 0;
  while (j + 1 < jobs.count && jobs.job[j + 1].first_block <= static_cast<int>(blockIdx.x)) ++j;
  const Job& w = jobs.job[j];
  const int o = static_cast<int>(blockIdx.x) - w.first_block;
  const int n = w.in_channels * w.kernel_area, in = w.in_channels, area = w.kernel_area;
  const Src* src = static_cast<const Src*>(w.src) + static_cast<std::int64_t>(o) * n;
  Dst* dst = static_cast<Dst*>(w.dst) + static_cast<std::int64_t>(o) * n;
  const float scale = w.gamma != nullptr ? w.gamma[o] * rsqrtf(w.var[o] + w.eps) : 1.0f;  // to_channels_last only
  if (n > kStagedFloats) {
    for (int k = threadIdx.x; k < n; k += kThreads) {
      if constexpr (kToChannelsLast) dst[k] = from_float<Dst>(to_float(src[ik_of_ki(k, in, area)]) * scale);
      else dst[ik_of_ki(k, in, area)] = from_float<Dst>(to_float(src[k]));
    }
    return;
  }
  for (int k = threadIdx.x; k < n; k += kThreads) {  // src in order
    if constexpr (kToChannelsLast) slab[k] = to_float(src[k]);
    else slab[ik_of_ki(k, in, area)] = to_float(src[k]);
  }
  __syncthreads();
  for (int k = threadIdx.x; k < n; k += kThreads) {  // dst in order
    if constexpr (kToChannelsLast) dst[k] = from_float<Dst>(slab[ik_of_ki(k, in, area)] * scale);
    else dst[k] = from_float<Dst>(slab[k]);
  }
}

template <typename Src, typename Dst, bool kToChannelsLast>
void launch(const std::vector<Weight>& weights, cudaStream_t stream) {
  for (std::size_t first = 0; first < weights.size(); first += kJobsPerLaunch) {
    Jobs jobs{};
    int blocks = 0, widest = 0;
    for (std::size_t i = first; i < std::min(weights.size(), first + kJobsPerLaunch); ++i) {
      const Weight& w = weights[i];
      jobs.job[jobs.count++] = {w.src,
                                w.dst,
                                static_cast<int>(w.out_channels),
                                static_cast<int>(w.in_channels),
                                static_cast<int>(w.kernel_area),
                                blocks,
                                w.fold.gamma,
                                w.fold.var,
                                w.fold.eps};
      blocks += static_cast<int>(w.out_channels);
      widest = std::max(widest, static_cast<int>(w.in_channels * w.kernel_area));
    }
    if (blocks == 0) continue;
    const std::size_t shared = sizeof(float) * static_cast<std::size_t>(std::min(widest, kStagedFloats));
    convert<Src, Dst, kToChannelsLast><<<blocks, kThreads, shared, stream>>>(jobs);
    TANDEM_CUDA_CHECK(cudaGetLastError());
  }
}

struct BiasJob {
  void* dst;
  int channels;
  BatchNormRef first, second;
};

struct BiasJobs {
  BiasJob job[kJobsPerLaunch / 2];
  int count;
};

__device__ float folded_bias(const BatchNormRef& bn, int c) {
  return bn.beta[c] - bn.mean[c] * bn.gamma[c] * rsqrtf(bn.var[c] + bn.eps);
}

template <typename Dst>
__global__ void __launch_bounds__(kThreads) biases(BiasJobs jobs) {  // one block per bias
  const BiasJob& b = jobs.job[blockIdx.x];
  for (int c = threadIdx.x; c < b.channels; c += blockDim.x) {
    float v = folded_bias(b.first, c);
    if (b.second.gamma != nullptr) v += folded_bias(b.second, c);
    static_cast<Dst*>(b.dst)[c] = from_float<Dst>(v);
  }
}

template <typename Dst>
void launch_biases(const std::vector<Bias>& all, cudaStream_t stream) {
  constexpr std::size_t kPer = kJobsPerLaunch / 2;
  for (std::size_t first = 0; first < all.size(); first += kPer) {
    BiasJobs jobs{};
    for (std::size_t i = first; i < std::min(all.size(), first + kPer); ++i)
      jobs.job[jobs.count++] = {all[i].dst, static_cast<int>(all[i].channels), all[i].first, all[i].second};
    biases<Dst><<<jobs.count, kThreads, 0, stream>>>(jobs);
    TANDEM_CUDA_CHECK(cudaGetLastError());
  }
}

}  // namespace

void to_channels_last(const std::vector<Weight>& weights, DType dtype, cuda::StreamHandle stream) {
  if (dtype == DType::f32) launch<float, float, true>(weights, stream);
  else launch<float, __nv_bfloat16, true>(weights, stream);
}

void from_channels_last(const std::vector<Weight>& weights, DType dtype, cuda::StreamHandle stream) {
  if (dtype == DType::f32) launch<float, float, false>(weights, stream);
  else launch<__nv_bfloat16, float, false>(weights, stream);
}

void fold_biases(const std::vector<Bias>& biases, DType dtype, cuda::StreamHandle stream) {
  if (dtype == DType::f32) launch_biases<float>(biases, stream);
  else launch_biases<__nv_bfloat16>(biases, stream);
}

}  // namespace tandem::weight_prep_kernels
