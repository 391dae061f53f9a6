#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <type_traits>

#include "common/torch/builtin_nets/float_convert.cuh"
#include "common/torch/builtin_nets/stem_conv_kernels.hpp"

namespace tandem::stem_conv_kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kPixels = 8;           // consecutive pixels of one row per thread
constexpr int kRows = 4;             // output rows per run: each thread kRows x kPixels outputs of one channel
constexpr int kPartialBlocks = 512;  // weight_grad's first kernel: at most this many blocks, one partial each
constexpr int kForwardBlocks = 512;  // fills a GPU; each block loads its filters once for several runs

using gpu::from_float;
using gpu::to_float;

// A block covers a run: kRows rows of one image, kRunLength columns wide, as kThreads / K lanes of
// kPixels pixels each, every lane with the K threads of all output channels. Its input patch is the
// kRows + 2 rows around the run, one padding column each side, [row][channel][column] with a pitch
// that keeps every lane's columns 16-byte aligned. kRows rows per run, not one: the per-run work
// (the run's indices, two barriers, the patch's loads, the stores' addresses) took more issue slots
// than the FMAs with one row (Nsight Compute: docs/results/stem-conv-ncu-h200.txt),
// and each of the kRows + 2 patch rows is read once for all the output rows (up to 3) it feeds.
template <int K>
constexpr int kRunLength = kPixels*(kThreads / K);

struct Run {
  int image_row0;  // n * H: the image's first row
  int h0, w0;      // the run's first output row and column
};

struct RunGrid {
  int across, down;  // runs across an image row, runs down an image
  int total;
};

template <int K>
__host__ __device__ __forceinline__ RunGrid run_grid(const Shape& s) {
  const int across = static_cast<int>((s.width + kRunLength<K> - 1) / kRunLength<K>);
  const int down = static_cast<int>((s.height + kRows - 1) / kRows);
  return {across, down, static_cast<int>(s.n) * down * across};
}

template <int K>
__device__ __forceinline__ Run run_at(int index, const Shape& s, const RunGrid& g) {
  const int band = index / g.across, n = band / g.down;
  return {n * static_cast<int>(s.height), (band % g.down) * kRows, (index % g.across) * kRunLength<K>};
}

// The patch of a run, staged through registers so that the next run's global loads are in flight
// while this run computes: fetch() loads a thread's share, next() hands it to shared memory.
template <typename T, int C, int K>
struct PatchShare {
  static constexpr int kColumns = kRunLength<K> + 2, kPitch = kColumns + 2;
  static constexpr int kValues = (kRows + 2) * C * kColumns, kSize = (kRows + 2) * C * kPitch;
  static constexpr int kPerThread = (kValues + kThreads - 1) / kThreads;
  float v[kPerThread];

  __device__ void fetch(const T* x, const Shape& s, const Run& r) {
    const int height = static_cast<int>(s.height), width = static_cast<int>(s.width);
#pragma unroll
    for (int m = 0; m < kPerThread; ++m) {
      const int i = static_cast<int>(threadIdx.x) + m * kThreads;
      const int column = i % kColumns, c = (i / kColumns) % C, dr = i / (kColumns * C);
      const int hh = r.h0 + dr - 1, ww = r.w0 + column - 1;
      v[m] = 0.0f;
      if (i < kValues && hh >= 0 && hh < height && ww >= 0 && ww < width)
        v[m] = to_float(x[(static_cast<std::int64_t>(r.image_row0 + hh) * width + ww) * C + c]);
    }
  }

  // Run `index`'s patch (fetched before) into shared memory once every thread is done with the last
  // one, then the fetch of the block's next run.
  __device__ void next(float* patch, const T* x, const Shape& s, const RunGrid& g, int index) {
    __syncthreads();
#pragma unroll
    for (int m = 0; m < kPerThread; ++m) {
      const int i = static_cast<int>(threadIdx.x) + m * kThreads;
      if (i < kValues) patch[(i / kColumns) * kPitch + i % kColumns] = v[m];  // [row * C + channel][column]
    }
    __syncthreads();
    const int following = index + static_cast<int>(gridDim.x);
    if (following < g.total) fetch(x, s, run_at<K>(following, s, g));
  }
};

// The kPixels + 2 patch columns a lane's pixels read from one row and channel: three 16-byte loads
// (the pitch leaves room for the last).
__device__ __forceinline__ void window(const float* row, float (&v)[kPixels + 4]) {
  const float4* q = reinterpret_cast<const float4*>(row);
#pragma unroll
  for (int i = 0; i < 3; ++i) {
    const float4 f = q[i];
    v[4 * i] = f.x, v[4 * i + 1] = f.y, v[4 * i + 2] = f.z, v[4 * i + 3] = f.w;
  }
}

// Calls visit(r, tap, v) for each of the run's kRows output rows r and each of the 9 * C filter taps,
// tap = (dr * 3 + dc) * C + c, where v[j] is the input that tap multiplies for the lane's pixel j of
// row r (from the patch staged at `patch`). Each patch row and channel is read once for the up to 3
// output rows it serves. Both kernels walk the taps this way; fully unrolled, v stays in registers.
template <int C, int kPitch, typename Visit>
__device__ __forceinline__ void for_each_tap(const float* patch, int p0, Visit&& visit) {
#pragma unroll
  for (int pr = 0; pr < kRows + 2; ++pr)
#pragma unroll
    for (int c = 0; c < C; ++c) {
      float v[kPixels + 4];
      window(patch + (pr * C + c) * kPitch + p0, v);
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const int dr = pr - r;
        if (dr < 0 || dr > 2) continue;
#pragma unroll
        for (int dc = 0; dc < 3; ++dc) visit(r, (dr * 3 + dc) * C + c, v + dc);
      }
    }
}

int total_runs(const Shape& s) { return s.out_channels == 32 ? run_grid<32>(s).total : run_grid<64>(s).total; }

// Both kernels walk the runs grid-stride, each thread holding kRows x kPixels outputs of one output
// channel k; each patch value read serves 3 taps x kPixels outputs of up to 3 rows from registers
// (shared memory reads, not FMAs, bound a first version with one pixel per thread, no faster than
// cuDNN: docs/results/HISTORY.md, "Figures that lived only in code comments").
template <typename T, int C, int K>
__global__ void __launch_bounds__(kThreads, 2) forward_kernel(const T* x, const T* w, Epilogue e, T* y, Shape s) {
  constexpr int kTaps = 9 * C;
  using Share = PatchShare<T, C, K>;
  __shared__ __align__(16) float patch[Share::kSize];
  __shared__ float filters[K * kTaps];
  const RunGrid g = run_grid<K>(s);
  const int height = static_cast<int>(s.height), width = static_cast<int>(s.width);
  const int k = static_cast<int>(threadIdx.x) % K, p0 = static_cast<int>(threadIdx.x) / K * kPixels;
  for (int i = static_cast<int>(threadIdx.x); i < K * kTaps; i += kThreads) filters[i] = to_float(w[i]);
  Share share;
  share.fetch(x, s, run_at<K>(static_cast<int>(blockIdx.x), s, g));
  __syncthreads();
  float filter[kTaps];
#pragma unroll
  for (int t = 0; t < kTaps; ++t) filter[t] = filters[k * kTaps + t];
  const float bias = e.bias != nullptr ? to_float(static_cast<const T*>(e.bias)[k]) : 0.0f;
  for (int index = static_cast<int>(blockIdx.x); index < g.total; index += static_cast<int>(gridDim.x)) {
    const Run r = run_at<K>(index, s, g);
    share.next(patch, x, s, g, index);
    float acc[kRows][kPixels] = {};
    for_each_tap<C, Share::kPitch>(patch, p0, [&](int row, int tap, const float* v) {
#pragma unroll
      for (int j = 0; j < kPixels; ++j) acc[row][j] = fmaf(v[j], filter[tap], acc[row][j]);
    });
#pragma unroll
    for (int row = 0; row < kRows; ++row) {
      if (r.h0 + row >= height) break;
      T* out = y + (static_cast<std::int64_t>(r.image_row0 + r.h0 + row) * width + r.w0 + p0) * K + k;
#pragma unroll
      for (int j = 0; j < kPixels; ++j)
        if (r.w0 + p0 + j < width) {
          float v = acc[row][j] + bias;
          if (e.relu && v < 0.0f) v = 0.0f;  // NaN stays NaN, as in ATen's ReLU
          out[static_cast<std::int64_t>(j) * K] = from_float<T>(v);
        }
    }
  }
}

template <typename T, int C, int K>
__global__ void __launch_bounds__(kThreads, 2) weight_grad_partials(const T* x, const T* dy, float* partial, Shape s) {
  constexpr int kTaps = 9 * C, lanes = kThreads / K;
  using Share = PatchShare<T, C, K>;
  __shared__ __align__(16) float patch[Share::kSize];
  __shared__ float lane_sums[kThreads * kTaps];
  const RunGrid g = run_grid<K>(s);
  const int height = static_cast<int>(s.height), width = static_cast<int>(s.width);
  const int k = static_cast<int>(threadIdx.x) % K, lane = static_cast<int>(threadIdx.x) / K, p0 = lane * kPixels;
  float acc[kTaps] = {};
  Share share;
  share.fetch(x, s, run_at<K>(static_cast<int>(blockIdx.x), s, g));
  for (int index = static_cast<int>(blockIdx.x); index < g.total; index += static_cast<int>(gridDim.x)) {
    const Run r = run_at<K>(index, s, g);
    float d[kRows][kPixels];
#pragma unroll
    for (int row = 0; row < kRows; ++row) {
      const bool inside = r.h0 + row < height;
      const T* in = dy + (static_cast<std::int64_t>(r.image_row0 + r.h0 + row) * width + r.w0 + p0) * K + k;
#pragma unroll
      for (int j = 0; j < kPixels; ++j)
        d[row][j] = inside && r.w0 + p0 + j < width ? to_float(in[static_cast<std::int64_t>(j) * K]) : 0.0f;
    }
    share.next(patch, x, s, g, index);
    for_each_tap<C, Share::kPitch>(patch, p0, [&](int row, int tap, const float* v) {
      float a = acc[tap];
#pragma unroll
      for (int j = 0; j < kPixels; ++j) a = fmaf(d[row][j], v[j], a);
      acc[tap] = a;
    });
  }
#pragma unroll
  for (int t = 0; t < kTaps; ++t) lane_sums[(lane * K + k) * kTaps + t] = acc[t];
  __syncthreads();
  const int outputs = K * kTaps;
  for (int i = static_cast<int>(threadIdx.x); i < outputs; i += kThreads) {
    float v = 0.0f;
    for (int l = 0; l < lanes; ++l) v += lane_sums[l * outputs + i];
    partial[static_cast<std::int64_t>(blockIdx.x) * outputs + i] = v;
  }
}

// One warp per weight: its lanes add every 32nd partial, then the warp adds the lanes, in a fixed
// order.
template <typename T>
__global__ void __launch_bounds__(kThreads) weight_grad_sum(const float* partial, T* dw, int blocks, int outputs) {
  const int weight = static_cast<int>((blockIdx.x * blockDim.x + threadIdx.x) / 32);
  const int lane = static_cast<int>(threadIdx.x % 32);
  if (weight >= outputs) return;  // whole warps leave together
  float v = 0.0f;
  for (int b = lane; b < blocks; b += 32) v += partial[static_cast<std::int64_t>(b) * outputs + weight];
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
  if (lane == 0) dw[weight] = from_float<T>(v);
}

int partial_blocks(const Shape& s) { return std::min(total_runs(s), kPartialBlocks); }

template <typename T, int C, int K>
void launch_forward(const void* x, const void* w, const Epilogue& e, void* y, const Shape& s, cudaStream_t stream) {
  forward_kernel<T, C, K><<<std::min(total_runs(s), kForwardBlocks), kThreads, 0, stream>>>(
      static_cast<const T*>(x), static_cast<const T*>(w), e, static_cast<T*>(y), s);
  TANDEM_CUDA_CHECK(cudaGetLastError());
}

template <typename T, int C, int K>
void launch_weight_grad(const void* x, const void* dy, void* dw, void* workspace, const Shape& s, cudaStream_t stream) {
  const int blocks = partial_blocks(s), outputs = static_cast<int>(s.out_channels) * 9 * C;
  auto* partial = static_cast<float*>(workspace);
  weight_grad_partials<T, C, K>
      <<<blocks, kThreads, 0, stream>>>(static_cast<const T*>(x), static_cast<const T*>(dy), partial, s);
  TANDEM_CUDA_CHECK(cudaGetLastError());
  weight_grad_sum<T><<<(outputs * 32 + kThreads - 1) / kThreads, kThreads, 0, stream>>>(partial, static_cast<T*>(dw),
                                                                                        blocks, outputs);
  TANDEM_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

bool supports(const Shape& s) {
  return s.in_channels >= 1 && s.in_channels <= 4 && (s.out_channels == 32 || s.out_channels == 64) && s.n >= 1 &&
         s.height >= 1 && s.width >= 1 && s.n * s.height * s.width < (std::int64_t{1} << 31);
}

std::size_t weight_grad_workspace_bytes(const Shape& s) {
  return sizeof(float) * static_cast<std::size_t>(partial_blocks(s)) * static_cast<std::size_t>(s.out_channels) * 9 *
         static_cast<std::size_t>(s.in_channels);
}

#define TANDEM_STEM_BY_CHANNELS(T, K, LAUNCH, ...) \
  switch (s.in_channels) {                         \
    case 1: LAUNCH<T, 1, K>(__VA_ARGS__); break;   \
    case 2: LAUNCH<T, 2, K>(__VA_ARGS__); break;   \
    case 3: LAUNCH<T, 3, K>(__VA_ARGS__); break;   \
    default: LAUNCH<T, 4, K>(__VA_ARGS__); break;  \
  }
#define TANDEM_STEM_DISPATCH(T, LAUNCH, ...)            \
  if (s.out_channels == 32) {                           \
    TANDEM_STEM_BY_CHANNELS(T, 32, LAUNCH, __VA_ARGS__) \
  } else {                                              \
    TANDEM_STEM_BY_CHANNELS(T, 64, LAUNCH, __VA_ARGS__) \
  }

void forward(const void* x, const void* w, const Epilogue& e, void* y, const Shape& s, DType dtype,
             cuda::StreamHandle stream) {
  if (dtype == DType::f32) {
    TANDEM_STEM_DISPATCH(float, launch_forward, x, w, e, y, s, stream)
  } else {
    TANDEM_STEM_DISPATCH(__nv_bfloat16, launch_forward, x, w, e, y, s, stream)
  }
}

void weight_grad(const void* x, const void* dy, void* dw, void* workspace, const Shape& s, DType dtype,
                 cuda::StreamHandle stream) {
  if (dtype == DType::f32) {
    TANDEM_STEM_DISPATCH(float, launch_weight_grad, x, dy, dw, workspace, s, stream)
  } else {
    TANDEM_STEM_DISPATCH(__nv_bfloat16, launch_weight_grad, x, dy, dw, workspace, s, stream)
  }
}

}  // namespace tandem::stem_conv_kernels
