#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <type_traits>

#include "common/torch/weight_kernels.hpp"

namespace tandem::weight_kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kPerThread = 8;
constexpr int kJobsPerLaunch = 32;  // keeps the kernel's parameters well under CUDA's 4 KB

struct Job {
  const void* src;
  void* dst;
  int out_channels, in_channels, kernel_area;
  int first_block;  // this job's blocks are [first_block, next job's first_block)
  const float *gamma, *var;
  float eps;
};

struct Jobs {
  Job job[kJobsPerLaunch];
  int count;
};

template <typename T>
__device__ __forceinline__ float to_float(T v) {
  if constexpr (std::is_same_v<T, float>) return v;
  else return __bfloat162float(v);
}

template <typename T>
__device__ __forceinline__ T from_float(float v) {
  if constexpr (std::is_same_v<T, float>) return v;
  else return __float2bfloat16_rn(v);
}

// Each block converts kThreads * kPerThread consecutive destination elements of one weight: the
// writes are coalesced, the reads gather from one output channel's few KB, which L1 holds.
template <typename Src, typename Dst, bool kToChannelsLast>
__global__ void __launch_bounds__(kThreads) convert(Jobs jobs) {
  int j = 0;
  while (j + 1 < jobs.count && jobs.job[j + 1].first_block <= static_cast<int>(blockIdx.x)) ++j;
  const Job& w = jobs.job[j];
  const std::int64_t per_channel = static_cast<std::int64_t>(w.in_channels) * w.kernel_area;
  const std::int64_t total = per_channel * w.out_channels;
  const std::int64_t first = static_cast<std::int64_t>(blockIdx.x - w.first_block) * kThreads * kPerThread;
  const Src* src = static_cast<const Src*>(w.src);
  Dst* dst = static_cast<Dst*>(w.dst);
#pragma unroll
  for (int t = 0; t < kPerThread; ++t) {
    const std::int64_t k = first + static_cast<std::int64_t>(t) * kThreads + threadIdx.x;
    if (k >= total) break;
    const int o = static_cast<int>(k / per_channel);
    const int rem = static_cast<int>(k - o * per_channel);
    std::int64_t from;
    if constexpr (kToChannelsLast) {  // k walks [O, K, I]; src is [O, I, K]
      const int kk = rem / w.in_channels, i = rem - kk * w.in_channels;
      from = o * per_channel + static_cast<std::int64_t>(i) * w.kernel_area + kk;
    } else {  // k walks [O, I, K]; src is [O, K, I]
      const int i = rem / w.kernel_area, kk = rem - i * w.kernel_area;
      from = o * per_channel + static_cast<std::int64_t>(kk) * w.in_channels + i;
    }
    float v = to_float(src[from]);
    if (w.gamma != nullptr) v *= w.gamma[o] * rsqrtf(w.var[o] + w.eps);
    dst[k] = from_float<Dst>(v);
  }
}

int blocks_for(const Weight& w) {
  const std::int64_t n = w.out_channels * w.in_channels * w.kernel_area;
  return static_cast<int>((n + kThreads * kPerThread - 1) / (kThreads * kPerThread));
}

template <typename Src, typename Dst, bool kToChannelsLast>
void launch(const std::vector<Weight>& weights, cudaStream_t stream) {
  for (std::size_t first = 0; first < weights.size(); first += kJobsPerLaunch) {
    Jobs jobs{};
    int blocks = 0;
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
      blocks += blocks_for(w);
    }
    if (blocks == 0) continue;
    convert<Src, Dst, kToChannelsLast><<<blocks, kThreads, 0, stream>>>(jobs);
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

}  // namespace tandem::weight_kernels
