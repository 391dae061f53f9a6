#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <type_traits>

#include "common/torch/builtin_nets/bn_act_device.cuh"
#include "common/torch/builtin_nets/bn_act_kernels.hpp"

namespace tandem::bn_act_kernels {
namespace {

// The reductions run one wide block per SM (at most): few partial sums for the last block to add.
// They reach under half of HBM's bandwidth (docs/results/HISTORY.md, "Our kernels"); L2 prefetch and
// 512-thread blocks measured slower (docs/results/bn-reduce-variants-h200.txt).
constexpr int kReduceThreads = 1024;
constexpr int kApplyThreads = 256;
constexpr int kMinRowsPerThread = 8;  // fewer blocks for small tensors: less for the last block to add
// Rows whose loads a reduction thread issues together (walk_rows): 64 bytes in flight per thread in
// both, within the 64 registers a 1024-thread block leaves each thread.
constexpr int kStatsBatch = 4, kBackwardBatch = 2;
constexpr std::int64_t kMaxChannels = 4096;

// Tail first: each reduction walks the rows from the last to the first, and the pass after it from
// the first to the last. What a pass read last is what L2 still holds when the next one starts, so
// the second pass over a tensor finds its first rows (all of them, for a tensor that fits L2's
// 50-60 MB) in L2 instead of HBM; and the statistics pass starts where a convolution that just wrote
// its output in row order left off.

// The last-block hand-off counters. Each reduction launch takes the next slot (round robin) and its
// last block resets it, so slots are zero whenever a launch starts, without a memset per launch (a
// node in every captured graph). Launches on one stream run in order; a graph's launches never run
// concurrently with themselves (CUDA orders a graph's launches); two streams would need thousands
// of launches in flight to meet on one slot.
constexpr unsigned kCounterSlots = 4096;
__device__ unsigned g_counters[kCounterSlots];
std::atomic<unsigned> next_counter{0};

struct StatsParams {
  Geometry g;
  const void* x;
  double* partials;
  unsigned counter;  // slot in g_counters
  const float *weight, *bias;
  float *running_mean, *running_var;
  std::int64_t* num_batches_tracked;
  float momentum, eps;
  float *save_mean, *save_invstd, *scale, *shift;
};

// Shifted sums (x - x[row 0]) and their squares: no cancellation when the mean is far from zero.
template <typename T>
__global__ void __launch_bounds__(kReduceThreads, 1) forward_stats(StatsParams p) {
  constexpr int V = kLanes<T>;
  extern __shared__ double shared[];
  const Geometry& g = p.g;
  const T* x = static_cast<const T*>(p.x);
  const int lane = threadIdx.x & (g.lanes - 1);
  float s[V] = {}, q[V] = {};
  if (lane < g.groups) {
    float shift[V];
    load16(x + lane * V, shift);
    walk_rows<kStatsBatch>(
        g, [&](std::int64_t row) { return load_raw16(x + row * g.channels + lane * V); },
        [&](const uint4& raw) {
      float v[V];
      unpack16<T>(raw, v);
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const float d = v[j] - shift[j];
        s[j] += d;
        q[j] = fmaf(d, d, q[j]);
      }
        });
  }
  store_block_sums<V>(g, s, q, p.partials, reinterpret_cast<float*>(shared));
  if (!last_block(&g_counters[p.counter])) return;
  const double n = static_cast<double>(g.rows);
  finish_sums(g, p.partials, shared, [&](int c, double sum, double sumsq) {
    const double m1 = sum / n;
    const double var = fmax(sumsq / n - m1 * m1, 0.0);
    const double mean = static_cast<double>(load1(x + c)) + m1;
    const float invstd = static_cast<float>(1.0 / sqrt(var + static_cast<double>(p.eps)));
    p.save_mean[c] = static_cast<float>(mean);
    p.save_invstd[c] = invstd;
    const float scale = p.weight[c] * invstd;
    p.scale[c] = scale;
    p.shift[c] = p.bias[c] - static_cast<float>(mean) * scale;
    const float m = p.momentum;
    p.running_mean[c] = (1.0f - m) * p.running_mean[c] + m * static_cast<float>(mean);
    p.running_var[c] = (1.0f - m) * p.running_var[c] + m * static_cast<float>(var * n / (n - 1.0));
  });
  if (threadIdx.x == 0) {
    ++*p.num_batches_tracked;
    g_counters[p.counter] = 0;
  }
}

// The 16-byte vectors an apply kernel's thread visits: first, first + step, ... below total, all of
// one channel group, because the grid's thread count is a multiple of the group count (apply_blocks).
struct VectorWalk {
  std::int64_t first, total, step;
  int group;
};

__device__ VectorWalk vector_walk(std::int64_t rows, int groups) {
  const std::int64_t first = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  return {first, rows * groups, static_cast<std::int64_t>(gridDim.x) * blockDim.x, static_cast<int>(first % groups)};
}

struct ApplyParams {
  std::int64_t rows;
  int channels, groups;
  const void *x, *residual;
  void* y;
  std::uint8_t* mask;
  const float *scale, *shift;
};

// y = relu(x * scale + shift + residual). ReLU as PyTorch's: NaN passes, and so does its gradient
// (threshold_backward zeroes where y <= 0 only).
template <typename T, bool kResidual, bool kRelu>
__global__ void __launch_bounds__(kApplyThreads) forward_apply(ApplyParams p) {
  constexpr int V = kLanes<T>;
  const VectorWalk w = vector_walk(p.rows, p.groups);
  if (w.first >= w.total) return;
  const int group = w.group;
  float scale[V], shift[V];
#pragma unroll
  for (int j = 0; j < V; ++j) scale[j] = p.scale[group * V + j], shift[j] = p.shift[group * V + j];
  const T* x = static_cast<const T*>(p.x);
  const T* res = static_cast<const T*>(p.residual);
  T* y = static_cast<T*>(p.y);
  for (std::int64_t i = w.first; i < w.total; i += w.step) {
    float v[V], r[V];
    load16(x + i * V, v);
    if constexpr (kResidual) load16(res + i * V, r);
    unsigned bits = 0;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      float o = fmaf(v[j], scale[j], shift[j]);
      if constexpr (kResidual) o += r[j];
      if constexpr (kRelu) {
        const bool zero = o <= 0.0f;
        bits |= static_cast<unsigned>(!zero) << j;
        o = zero ? 0.0f : o;
      }
      v[j] = o;
    }
    store16(y + i * V, v);
    if constexpr (kRelu) p.mask[i] = static_cast<std::uint8_t>(bits);
  }
}

struct BackwardParams {
  Geometry g;
  const void *dy, *x;
  const std::uint8_t* mask;
  const float *weight, *save_mean, *save_invstd;
  double* partials;
  unsigned counter;  // slot in g_counters
  float *dweight, *dbias;
  float *a, *b, *e;  // dx = a dz + b (x - mean) + e
};

template <typename T, bool kRelu>
__global__ void __launch_bounds__(kReduceThreads, 1) backward_reduce(BackwardParams p) {
  constexpr int V = kLanes<T>;
  extern __shared__ double shared[];
  const Geometry& g = p.g;
  const T* dy = static_cast<const T*>(p.dy);
  const T* x = static_cast<const T*>(p.x);
  const int lane = threadIdx.x & (g.lanes - 1);
  float sdz[V] = {}, sdzx[V] = {};
  if (lane < g.groups) {
    float mean[V];
#pragma unroll
    for (int j = 0; j < V; ++j) mean[j] = p.save_mean[lane * V + j];
    struct Row {
      uint4 dy, x;
      unsigned bits;
    };
    walk_rows<kBackwardBatch>(
        g,
        [&](std::int64_t row) {
      const std::int64_t at = row * g.channels + lane * V;
      return Row{load_raw16(dy + at), load_raw16(x + at), kRelu ? p.mask[row * g.groups + lane] : 0xffu};
        },
        [&](const Row& row) {
      float d[V], v[V];
      unpack16<T>(row.dy, d);
      unpack16<T>(row.x, v);
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const float dz = (row.bits >> j) & 1u ? d[j] : 0.0f;
        sdz[j] += dz;
        sdzx[j] = fmaf(dz, v[j] - mean[j], sdzx[j]);
      }
    });
  }
  store_block_sums<V>(g, sdz, sdzx, p.partials, reinterpret_cast<float*>(shared));
  if (!last_block(&g_counters[p.counter])) return;
  const double n = static_cast<double>(g.rows);
  finish_sums(g, p.partials, shared, [&](int c, double sum_dz, double sum_dzx) {
    const double invstd = p.save_invstd[c], w = p.weight[c];
    p.dbias[c] = static_cast<float>(sum_dz);
    p.dweight[c] = static_cast<float>(sum_dzx * invstd);
    p.a[c] = static_cast<float>(w * invstd);
    p.b[c] = static_cast<float>(-w * invstd * invstd * invstd * sum_dzx / n);
    p.e[c] = static_cast<float>(-w * invstd * sum_dz / n);
  });
  if (threadIdx.x == 0) g_counters[p.counter] = 0;
}

struct BackwardApplyParams {
  std::int64_t rows;
  int channels, groups;
  const void *dy, *x;
  const std::uint8_t* mask;
  const float *mean, *a, *b, *e;
  void *dx, *dresidual;
};

template <typename T, bool kRelu, bool kResidual>
__global__ void __launch_bounds__(kApplyThreads) backward_apply(BackwardApplyParams p) {
  constexpr int V = kLanes<T>;
  const VectorWalk w = vector_walk(p.rows, p.groups);
  if (w.first >= w.total) return;
  const int group = w.group;
  float mean[V], a[V], b[V], e[V];
#pragma unroll
  for (int j = 0; j < V; ++j) {
    const int c = group * V + j;
    mean[j] = p.mean[c], a[j] = p.a[c], b[j] = p.b[c], e[j] = p.e[c];
  }
  const T* dy = static_cast<const T*>(p.dy);
  const T* x = static_cast<const T*>(p.x);
  for (std::int64_t i = w.first; i < w.total; i += w.step) {
    float d[V], v[V];
    load16(dy + i * V, d);
    load16(x + i * V, v);
    const unsigned bits = kRelu ? p.mask[i] : 0xffu;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      d[j] = (bits >> j) & 1u ? d[j] : 0.0f;
      v[j] = fmaf(a[j], d[j], fmaf(b[j], v[j] - mean[j], e[j]));
    }
    store16(static_cast<T*>(p.dx) + i * V, v);
    if constexpr (kResidual) store16(static_cast<T*>(p.dresidual) + i * V, d);
  }
}

// ---- host side ----

int sm_count() {
  int device = 0, count = 0;
  TANDEM_CUDA_CHECK(cudaGetDevice(&device));
  TANDEM_CUDA_CHECK(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device));
  return count;
}

int lanes_of(DType t) { return t == DType::f32 ? 4 : 8; }

Geometry geometry(DType t, std::int64_t rows, std::int64_t channels) {
  const int groups = static_cast<int>(channels / lanes_of(t));
  int lanes = 1;
  while (lanes < groups) lanes *= 2;
  return {rows, static_cast<int>(channels), groups, lanes};
}

int reduction_blocks(const Geometry& g) {
  const std::int64_t rows_at_once = kReduceThreads / g.lanes;
  const std::int64_t wanted = (g.rows + rows_at_once * kMinRowsPerThread - 1) / (rows_at_once * kMinRowsPerThread);
  return static_cast<int>(std::clamp<std::int64_t>(wanted, 1, sm_count()));
}

// Where a launch's pieces sit in its workspace.
struct Carved {
  float* coefficients;  // 3 * channels floats
  double* partials;     // 2 * blocks * channels doubles
};

std::size_t round16(std::size_t n) { return (n + 15) / 16 * 16; }

Carved carve(void* workspace, const Geometry& g) {
  auto* base = static_cast<unsigned char*>(workspace);
  const std::size_t partials_at = round16(3 * sizeof(float) * static_cast<std::size_t>(g.channels));
  return {reinterpret_cast<float*>(base), reinterpret_cast<double*>(base + partials_at)};
}

unsigned take_counter() { return next_counter.fetch_add(1, std::memory_order_relaxed) % kCounterSlots; }

std::size_t reduction_shared_bytes(DType t) {
  // store_block_sums needs lanes-per-16-bytes floats per thread; finish_sums 2 doubles per thread.
  return std::max<std::size_t>(static_cast<std::size_t>(kReduceThreads) * lanes_of(t) * sizeof(float),
                               2 * kReduceThreads * sizeof(double));
}

// A grid whose thread count is a multiple of `groups`, so each thread keeps one channel group.
int apply_blocks(std::int64_t vectors, int groups) {
  int unit = groups;
  for (int common = kApplyThreads; common > 1; common /= 2)
    if (groups % common == 0) {
      unit = groups / common;
      break;
    }
  const std::int64_t wanted = std::min<std::int64_t>((vectors + kApplyThreads - 1) / kApplyThreads, 8LL * sm_count());
  return static_cast<int>((std::max<std::int64_t>(wanted, 1) + unit - 1) / unit * unit);
}

template <typename T>
void launch_forward(const Forward& f, cudaStream_t stream) {
  const Geometry g = geometry(f.dtype, f.rows, f.channels);
  const Carved w = carve(f.workspace, g);
  const int blocks = reduction_blocks(g);
  float* scale = w.coefficients;
  float* shift = w.coefficients + g.channels;
  StatsParams s{g,
                f.x,
                w.partials,
                take_counter(),
                f.weight,
                f.bias,
                f.running_mean,
                f.running_var,
                f.num_batches_tracked,
                f.momentum,
                f.eps,
                f.save_mean,
                f.save_invstd,
                scale,
                shift};
  forward_stats<T><<<blocks, kReduceThreads, reduction_shared_bytes(f.dtype), stream>>>(s);
  TANDEM_CUDA_CHECK(cudaGetLastError());

  ApplyParams a{f.rows, g.channels, g.groups, f.x, f.residual, f.y, f.mask, scale, shift};
  const int grid = apply_blocks(f.rows * g.groups, g.groups);
  const bool res = f.residual != nullptr;
  if (f.relu && res) forward_apply<T, true, true><<<grid, kApplyThreads, 0, stream>>>(a);
  else if (f.relu) forward_apply<T, false, true><<<grid, kApplyThreads, 0, stream>>>(a);
  else if (res) forward_apply<T, true, false><<<grid, kApplyThreads, 0, stream>>>(a);
  else forward_apply<T, false, false><<<grid, kApplyThreads, 0, stream>>>(a);
  TANDEM_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void launch_backward(const Backward& b, cudaStream_t stream) {
  const Geometry g = geometry(b.dtype, b.rows, b.channels);
  const Carved w = carve(b.workspace, g);
  const int blocks = reduction_blocks(g);
  float* ka = w.coefficients;
  float* kb = ka + g.channels;
  float* ke = kb + g.channels;
  BackwardParams r{g,          b.dy,           b.x,       b.mask,  b.weight, b.save_mean, b.save_invstd,
                   w.partials, take_counter(), b.dweight, b.dbias, ka,       kb,          ke};
  const std::size_t shared = reduction_shared_bytes(b.dtype);
  if (b.relu) backward_reduce<T, true><<<blocks, kReduceThreads, shared, stream>>>(r);
  else backward_reduce<T, false><<<blocks, kReduceThreads, shared, stream>>>(r);
  TANDEM_CUDA_CHECK(cudaGetLastError());

  BackwardApplyParams a{b.rows, g.channels, g.groups, b.dy, b.x, b.mask, b.save_mean, ka, kb, ke, b.dx, b.dresidual};
  const int grid = apply_blocks(b.rows * g.groups, g.groups);
  const bool res = b.dresidual != nullptr;
  if (b.relu && res) backward_apply<T, true, true><<<grid, kApplyThreads, 0, stream>>>(a);
  else if (b.relu) backward_apply<T, true, false><<<grid, kApplyThreads, 0, stream>>>(a);
  else if (res) backward_apply<T, false, true><<<grid, kApplyThreads, 0, stream>>>(a);
  else backward_apply<T, false, false><<<grid, kApplyThreads, 0, stream>>>(a);
  TANDEM_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

bool supported(DType dtype, std::int64_t channels) {
  return channels > 0 && channels <= kMaxChannels && channels % lanes_of(dtype) == 0;
}

std::size_t workspace_bytes(DType dtype, std::int64_t rows, std::int64_t channels) {
  const Geometry g = geometry(dtype, rows, channels);
  const std::size_t partials = 2 * sizeof(double) * static_cast<std::size_t>(reduction_blocks(g)) *
                               static_cast<std::size_t>(channels);
  return round16(3 * sizeof(float) * static_cast<std::size_t>(channels)) + partials;
}

void forward_training(const Forward& f, cuda::StreamHandle stream) {
  if (f.dtype == DType::f32) launch_forward<float>(f, stream);
  else launch_forward<bf16>(f, stream);
}

void backward(const Backward& b, cuda::StreamHandle stream) {
  if (b.dtype == DType::f32) launch_backward<float>(b, stream);
  else launch_backward<bf16>(b, stream);
}

}  // namespace tandem::bn_act_kernels
