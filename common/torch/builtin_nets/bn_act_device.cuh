// Device helpers of the fused BatchNorm's kernels (bn_act_kernels.cu): 16-byte vector loads and
// stores of float32 or bfloat16 rows, and the two-level channel reduction every statistics pass uses
// (a tree over each block's rows, then the last block to finish adds the blocks' partial sums in
// block order, so the result is the same on every run). Included by that one .cu file only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

namespace tandem::bn_act_kernels {
namespace {

using bf16 = __nv_bfloat16;

// 16 bytes of T as floats.
template <typename T>
constexpr int kLanes = 16 / sizeof(T);

// 16 bytes as they sit in memory, and as kLanes<T> floats: the reductions issue several raw loads
// before they unpack any (walk_rows).
template <typename T>
__device__ __forceinline__ uint4 load_raw16(const T* p) {
  return *reinterpret_cast<const uint4*>(p);
}

template <typename T>
__device__ __forceinline__ void unpack16(const uint4& r, float (&v)[kLanes<T>]) {
  if constexpr (std::is_same_v<T, float>) {
    v[0] = __uint_as_float(r.x), v[1] = __uint_as_float(r.y), v[2] = __uint_as_float(r.z), v[3] = __uint_as_float(r.w);
  } else {
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&r);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 f = __bfloat1622float2(h[i]);
      v[2 * i] = f.x, v[2 * i + 1] = f.y;
    }
  }
}

template <typename T>
__device__ __forceinline__ void load16(const T* p, float (&v)[kLanes<T>]) {
  unpack16<T>(load_raw16(p), v);
}

template <typename T>
__device__ __forceinline__ void store16(T* p, const float (&v)[kLanes<T>]) {
  if constexpr (std::is_same_v<T, float>) {
    *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
  } else {
    uint4 r;
    __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&r);
#pragma unroll
    for (int i = 0; i < 4; ++i) h[i] = __floats2bfloat162_rn(v[2 * i], v[2 * i + 1]);
    *reinterpret_cast<uint4*>(p) = r;
  }
}

template <typename T>
__device__ __forceinline__ float load1(const T* p) {
  if constexpr (std::is_same_v<T, float>) return *p;
  else return __bfloat162float(*p);
}

// The reductions' geometry: `lanes` threads (a power of two >= groups) cover one row's channel
// groups, blockDim.x / lanes rows are read at once.
struct Geometry {
  std::int64_t rows;
  int channels, groups, lanes;
};

// A reduction thread's rows (blockDim.x / g.lanes rows at once, the grid striding over them), tail
// first (bn_act_kernels.cu says why), kBatch at a time: the batch's loads are all issued before the
// first is used, so that each thread has kBatch loads in flight. Loading and using one row at a time, the
// reductions moved well under half of an H200's HBM bandwidth, every warp waiting on its
// one load (measured: docs/results/HISTORY.md, "Our kernels against what ATen and cuDNN ran").
template <int kBatch, class Load, class Use>
__device__ __forceinline__ void walk_rows(const Geometry& g, Load&& load, Use&& use) {
  using Loaded = decltype(load(std::int64_t{0}));
  const std::int64_t rows_at_once = blockDim.x / g.lanes, rows = g.rows;
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * rows_at_once;
  std::int64_t r = static_cast<std::int64_t>(blockIdx.x) * rows_at_once + threadIdx.x / g.lanes;
  for (; r + (kBatch - 1) * step < rows; r += kBatch * step) {
    Loaded got[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) got[b] = load(rows - 1 - (r + b * step));
#pragma unroll
    for (int b = 0; b < kBatch; ++b) use(got[b]);
  }
  for (; r < rows; r += step) use(load(rows - 1 - r));
}

// Adds a[] and b[] of the threads sharing a channel group (tree over the block's rows, in shared
// memory laid out [lane element][thread] so that no two threads of a warp hit one bank), and writes
// the block's sums as doubles to partials[0 or 1][block][channel].
template <int V>
__device__ void store_block_sums(const Geometry& g, float (&a)[V], float (&b)[V], double* partials, float* red) {
  const int tid = threadIdx.x, n = blockDim.x;
  const int lane = tid & (g.lanes - 1), row = tid / g.lanes, rows = n / g.lanes;
  for (int pass = 0; pass < 2; ++pass) {
    const float* v = pass == 0 ? a : b;
#pragma unroll
    for (int j = 0; j < V; ++j) red[j * n + tid] = v[j];
    __syncthreads();
    for (int stride = rows / 2; stride > 0; stride /= 2) {
      if (row < stride)
#pragma unroll
        for (int j = 0; j < V; ++j) red[j * n + tid] += red[j * n + tid + stride * g.lanes];
      __syncthreads();
    }
    if (row == 0 && lane < g.groups)
#pragma unroll
      for (int j = 0; j < V; ++j)
        partials[(static_cast<std::int64_t>(pass) * gridDim.x + blockIdx.x) * g.channels + lane * V + j] =
            red[j * n + tid];
    __syncthreads();
  }
}

// True in the one block that finishes last; its partial sums and everyone else's are then visible.
__device__ bool last_block(unsigned* counter) {
  __shared__ bool last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(counter, 1u) == gridDim.x - 1;
  __syncthreads();
  return last;
}

// In the last block: calls done(c, sum_a, sum_b) once per channel with the sums over all blocks.
// Each channel's blocks are split over `ways` threads, each adding its share in block order, and
// the shares are added in thread order: the same order on every run.
template <class Done>
__device__ void finish_sums(const Geometry& g, const double* partials, double* red, Done&& done) {
  const int tid = threadIdx.x, n = blockDim.x, blocks = gridDim.x;
  for (int first = 0; first < g.channels; first += n) {
    const int count = min(n, g.channels - first);
    const int ways = n / count;
    const int c = first + tid % count, way = tid / count;
    double sa = 0.0, sb = 0.0;
    if (way < ways)
#pragma unroll 8
      for (int blk = way; blk < blocks; blk += ways) {
        sa += __ldcg(partials + static_cast<std::int64_t>(blk) * g.channels + c);
        sb += __ldcg(partials + (static_cast<std::int64_t>(blocks) + blk) * g.channels + c);
      }
    if (way < ways) red[2 * (way * count + tid % count)] = sa, red[2 * (way * count + tid % count) + 1] = sb;
    __syncthreads();
    if (way == 0) {
      for (int w = 1; w < ways; ++w) sa += red[2 * (w * count + tid)], sb += red[2 * (w * count + tid) + 1];
      done(c, sa, sb);
    }
    __syncthreads();
  }
}

}  // namespace
}  // namespace tandem::bn_act_kernels
