#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "common/torch/cross_entropy_kernels.hpp"

namespace tandem::cross_entropy_kernels {
namespace {

constexpr int kForwardThreads = 1024;
constexpr int kBackwardThreads = 256;

__global__ void __launch_bounds__(kForwardThreads) forward_kernel(CrossEntropy p) {
  __shared__ float warp_loss[kForwardThreads / 32];
  __shared__ long long warp_hits[kForwardThreads / 32];
  float loss = 0.0f;
  long long hits = 0;
  for (std::int64_t n = threadIdx.x; n < p.n; n += kForwardThreads) {
    const float* row = p.logits + n * p.classes;
    float top = row[0];
    std::int64_t best = 0;
    for (std::int64_t k = 1; k < p.classes; ++k)
      if (row[k] > top) {
        top = row[k];
        best = k;
      }
    float sum = 0.0f;
    for (std::int64_t k = 0; k < p.classes; ++k) sum += expf(row[k] - top);
    const float lse = top + logf(sum);
    p.log_sum_exp[n] = lse;
    const std::int64_t label = p.labels[n];
    loss += (label >= 0 && label < p.classes) ? lse - row[label] : NAN;
    hits += best == label ? 1 : 0;
  }
  for (int offset = 16; offset > 0; offset /= 2) {
    loss += __shfl_down_sync(0xffffffffu, loss, offset);
    hits += __shfl_down_sync(0xffffffffu, hits, offset);
  }
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  if (lane == 0) {
    warp_loss[warp] = loss;
    warp_hits[warp] = hits;
  }
  __syncthreads();
  if (warp != 0) return;
  loss = warp_loss[lane];  // kForwardThreads / 32 == 32 warps: one value per lane
  hits = warp_hits[lane];
  for (int offset = 16; offset > 0; offset /= 2) {
    loss += __shfl_down_sync(0xffffffffu, loss, offset);
    hits += __shfl_down_sync(0xffffffffu, hits, offset);
  }
  if (lane == 0) {
    *p.loss = loss / static_cast<float>(p.n);
    *p.correct = hits;
  }
}

__global__ void __launch_bounds__(kBackwardThreads) backward_kernel(CrossEntropyBackward p) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * kBackwardThreads + threadIdx.x;
  if (i >= p.n * p.classes) return;
  const std::int64_t n = i / p.classes, k = i % p.classes;
  const float scale = *p.dloss / static_cast<float>(p.n);
  p.dlogits[i] = (expf(p.logits[i] - p.log_sum_exp[n]) - (k == p.labels[n] ? 1.0f : 0.0f)) * scale;
}

}  // namespace

void cross_entropy_forward(const CrossEntropy& p, cuda::StreamHandle stream) {
  static_assert(kForwardThreads == 32 * 32, "the block's second reduction takes one warp's value per lane");
  forward_kernel<<<1, kForwardThreads, 0, stream>>>(p);
  TANDEM_CUDA_CHECK(cudaGetLastError());
}

void cross_entropy_backward(const CrossEntropyBackward& p, cuda::StreamHandle stream) {
  const std::int64_t logits = p.n * p.classes;
  if (logits == 0) return;
  const auto blocks = static_cast<unsigned>((logits + kBackwardThreads - 1) / kBackwardThreads);
  backward_kernel<<<blocks, kBackwardThreads, 0, stream>>>(p);
  TANDEM_CUDA_CHECK(cudaGetLastError());
}

}  // namespace tandem::cross_entropy_kernels
