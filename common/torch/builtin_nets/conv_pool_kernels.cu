#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "common/torch/builtin_nets/float_convert.cuh"
#include "common/torch/builtin_nets/conv_pool_kernels.hpp"

namespace tandem::conv_pool_kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxInChannels = 4;
constexpr int kMaxOutChannels = 32;
constexpr int kMaxPoolLinearChannels = 8192;  // 32 KB of float32 means per block

using gpu::from_float;
using gpu::to_float;

// ATen's max-pool lets NaN win; fmaxf would drop it.
__device__ __forceinline__ float nan_max(float a, float b) { return (a > b || a != a) ? a : b; }

struct Params {
  const float* x;
  std::int64_t stride_n, stride_c, stride_h, stride_w;
  int height, width, pooled_h, pooled_w;
  std::int64_t pixels;  // N * pooled_h * pooled_w: one thread each
  const void* weight;
  const void* bias;
  void* out;
};

// Writes `count` floats (a multiple of 8) as dtype T with 16-byte stores.
template <typename T, int kCount>
__device__ __forceinline__ void store(T* out, const float (&v)[kCount]) {
  static_assert(kCount % 8 == 0);
  if constexpr (std::is_same_v<T, float>) {
#pragma unroll
    for (int i = 0; i < kCount; i += 4)
      reinterpret_cast<float4*>(out)[i / 4] = make_float4(v[i], v[i + 1], v[i + 2], v[i + 3]);
  } else {
#pragma unroll
    for (int i = 0; i < kCount; i += 8) {
      __nv_bfloat162 packed[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) packed[j] = __floats2bfloat162_rn(v[i + 2 * j], v[i + 2 * j + 1]);
      reinterpret_cast<uint4*>(out)[i / 8] = *reinterpret_cast<const uint4*>(packed);
    }
  }
}

// One thread per pooled pixel, computing all kOut channels from its 4x4 input window. The weights
// sit in shared memory: every thread of a warp reads the same one (a broadcast).
template <typename T, int kIn, int kOut>
__global__ void __launch_bounds__(kThreads) conv3x3_relu_pool2_kernel(Params p) {
  __shared__ float w[kOut * 9 * kIn];
  __shared__ float b[kOut];
  for (int i = static_cast<int>(threadIdx.x); i < kOut * 9 * kIn; i += kThreads)
    w[i] = to_float(static_cast<const T*>(p.weight)[i]);
  for (int i = static_cast<int>(threadIdx.x); i < kOut; i += kThreads)
    b[i] = to_float(static_cast<const T*>(p.bias)[i]);
  __syncthreads();

  const std::int64_t pixel = static_cast<std::int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (pixel >= p.pixels) return;
  const int pw = static_cast<int>(pixel % p.pooled_w);
  const int ph = static_cast<int>((pixel / p.pooled_w) % p.pooled_h);
  const std::int64_t n = pixel / (static_cast<std::int64_t>(p.pooled_w) * p.pooled_h);

  // The window's rows 2ph-1 .. 2ph+2 and columns 2pw-1 .. 2pw+2; zero outside the image (the padding).
  float in[kIn][4][4];
  const float* image = p.x + n * p.stride_n;
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const int y = 2 * ph - 1 + r;
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int x = 2 * pw - 1 + c;
      const bool inside = y >= 0 && y < p.height && x >= 0 && x < p.width;
#pragma unroll
      for (int k = 0; k < kIn; ++k)
        in[k][r][c] = inside ? __ldg(image + k * p.stride_c + y * p.stride_h + x * p.stride_w) : 0.0f;
    }
  }

  float out[kOut];
#pragma unroll
  for (int o = 0; o < kOut; ++o) {
    float a00 = 0, a01 = 0, a10 = 0, a11 = 0;  // the 2x2 convolution outputs this pooled pixel covers
#pragma unroll
    for (int ky = 0; ky < 3; ++ky)
#pragma unroll
      for (int kx = 0; kx < 3; ++kx)
#pragma unroll
        for (int k = 0; k < kIn; ++k) {
          const float wk = w[((o * 3 + ky) * 3 + kx) * kIn + k];
          a00 = fmaf(wk, in[k][ky][kx], a00);
          a01 = fmaf(wk, in[k][ky][kx + 1], a01);
          a10 = fmaf(wk, in[k][ky + 1][kx], a10);
          a11 = fmaf(wk, in[k][ky + 1][kx + 1], a11);
        }
    const float m = nan_max(nan_max(a00, a01), nan_max(a10, a11)) + b[o];
    out[o] = m > 0.0f || m != m ? m : 0.0f;
  }
  store<T, kOut>(static_cast<T*>(p.out) + pixel * kOut, out);
}

template <typename T, int kOut>
void launch_conv(const Params& p, int in_channels, cudaStream_t stream) {
  const auto blocks = static_cast<unsigned>((p.pixels + kThreads - 1) / kThreads);
  switch (in_channels) {
    case 1: conv3x3_relu_pool2_kernel<T, 1, kOut><<<blocks, kThreads, 0, stream>>>(p); break;
    case 2: conv3x3_relu_pool2_kernel<T, 2, kOut><<<blocks, kThreads, 0, stream>>>(p); break;
    case 3: conv3x3_relu_pool2_kernel<T, 3, kOut><<<blocks, kThreads, 0, stream>>>(p); break;
    default: conv3x3_relu_pool2_kernel<T, 4, kOut><<<blocks, kThreads, 0, stream>>>(p); break;
  }
}

template <typename T>
void launch_conv(const Params& p, int in_channels, int out_channels, cudaStream_t stream) {
  switch (out_channels) {
    case 8: launch_conv<T, 8>(p, in_channels, stream); break;
    case 16: launch_conv<T, 16>(p, in_channels, stream); break;
    default: launch_conv<T, 32>(p, in_channels, stream); break;
  }
}

// One thread per 16-byte vector of channels of one pooled pixel.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    max_pool2_nhwc_kernel(const T* x, T* out, std::int64_t vectors, int pooled_h, int pooled_w, int vectors_per_pixel) {
  constexpr int kLanes = 16 / sizeof(T);
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= vectors) return;
  const int v = static_cast<int>(i % vectors_per_pixel);
  const std::int64_t pixel = i / vectors_per_pixel;
  const int pw = static_cast<int>(pixel % pooled_w);
  const int ph = static_cast<int>((pixel / pooled_w) % pooled_h);
  const std::int64_t n = pixel / (static_cast<std::int64_t>(pooled_w) * pooled_h);
  const std::int64_t row = static_cast<std::int64_t>(2 * pooled_w) * vectors_per_pixel;  // one input row, in vectors
  const uint4* in = reinterpret_cast<const uint4*>(x) +
                    ((n * 2 * pooled_h + 2 * ph) * 2 * pooled_w + 2 * pw) * vectors_per_pixel + v;
  const uint4 q[4] = {__ldg(in), __ldg(in + vectors_per_pixel), __ldg(in + row), __ldg(in + row + vectors_per_pixel)};
  const T* e[4] = {reinterpret_cast<const T*>(&q[0]), reinterpret_cast<const T*>(&q[1]),
                   reinterpret_cast<const T*>(&q[2]), reinterpret_cast<const T*>(&q[3])};
  uint4 result;
  T* r = reinterpret_cast<T*>(&result);
#pragma unroll
  for (int l = 0; l < kLanes; ++l) {
    // The max of four values is one of them: picking it keeps bf16 exact.
    int best = 0;
#pragma unroll
    for (int j = 1; j < 4; ++j) {
      const float a = to_float(e[best][l]), c = to_float(e[j][l]);
      if (nan_max(a, c) != a && a == a) best = j;
    }
    r[l] = e[best][l];
  }
  reinterpret_cast<uint4*>(out)[i] = result;
}

template <typename T>
__global__ void __launch_bounds__(kThreads) pool_linear_kernel(PoolLinear p) {
  __shared__ float means[kMaxPoolLinearChannels];
  const auto channels = static_cast<int>(p.channels), pixels = static_cast<int>(p.pixels);
  const T* image = static_cast<const T*>(p.x) + static_cast<std::int64_t>(blockIdx.x) * pixels * channels;
  const float scale = 1.0f / static_cast<float>(pixels);
  for (int c = static_cast<int>(threadIdx.x); c < channels; c += kThreads) {
    float sum = 0.0f;
#pragma unroll 4
    for (int q = 0; q < pixels; ++q) sum += to_float(image[static_cast<std::int64_t>(q) * channels + c]);
    means[c] = sum * scale;
    if (p.means != nullptr) p.means[static_cast<std::int64_t>(blockIdx.x) * channels + c] = sum * scale;
  }
  __syncthreads();
  const int lane = static_cast<int>(threadIdx.x) % 32;
  for (auto k = static_cast<int>(threadIdx.x) / 32; k < p.classes; k += kThreads / 32) {
    const float* row = p.weight + static_cast<std::int64_t>(k) * channels;
    float dot = 0.0f;
    for (int c = lane; c < channels; c += 32) dot = fmaf(means[c], row[c], dot);
    for (int offset = 16; offset > 0; offset /= 2) dot += __shfl_down_sync(0xffffffffu, dot, offset);
    if (lane == 0) p.logits[blockIdx.x * p.classes + k] = dot + (p.bias != nullptr ? p.bias[k] : 0.0f);
  }
}

constexpr int kGradChannels = 64;                      // a weight-gradient block's channels
constexpr int kGradGroups = kThreads / kGradChannels;  // ... and how many ways it splits the batch

// Blocks [0, N): image n's input gradient, (dlogits[n] . W) / pixels in each of its pixels. The rest:
// class k's weight gradient over one run of kGradChannels channels, the sum over n of
// dlogits[n, k] * means[n, c] split kGradGroups ways across the block (a 128-image batch is 32 terms
// a thread), and in the first run's block the bias's gradient. Every sum in a fixed order: the same
// bits on every run.
template <typename T>
__global__ void __launch_bounds__(kThreads) pool_linear_backward_kernel(PoolLinearBackward p) {
  const auto channels = static_cast<int>(p.channels), classes = static_cast<int>(p.classes);
  if (blockIdx.x < p.n) {
    const std::int64_t n = blockIdx.x;
    const float* dl = p.dlogits + n * classes;
    const float scale = 1.0f / static_cast<float>(p.pixels);
    T* image = static_cast<T*>(p.dx) + n * p.pixels * channels;
    for (int c = static_cast<int>(threadIdx.x); c < channels; c += kThreads) {
      float g = 0.0f;
      for (int k = 0; k < classes; ++k)
        g = fmaf(__ldg(dl + k), p.weight[static_cast<std::int64_t>(k) * channels + c], g);
      const T v = from_float<T>(g * scale);
      for (std::int64_t q = 0; q < p.pixels; ++q) image[q * channels + c] = v;
    }
    return;
  }
  __shared__ float partial[kGradGroups][kGradChannels];
  const std::int64_t runs = (channels + kGradChannels - 1) / kGradChannels, job = blockIdx.x - p.n;
  const std::int64_t k = job / runs;
  const int c = static_cast<int>(job % runs) * kGradChannels + static_cast<int>(threadIdx.x) % kGradChannels;
  const int group = static_cast<int>(threadIdx.x) / kGradChannels;
  float g = 0.0f;
  if (c < channels)
    for (std::int64_t n = group; n < p.n; n += kGradGroups)
      g = fmaf(__ldg(p.dlogits + n * classes + k), p.means[n * channels + c], g);
  partial[group][threadIdx.x % kGradChannels] = g;
  __syncthreads();
  if (group == 0 && c < channels) {
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < kGradGroups; ++i) sum += partial[i][threadIdx.x];
    p.dweight[k * channels + c] = sum;
  }
  if (p.dbias == nullptr || job % runs != 0 || threadIdx.x >= 32) return;
  float sum = 0.0f;
  for (std::int64_t n = threadIdx.x; n < p.n; n += 32) sum += p.dlogits[n * classes + k];
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_down_sync(0xffffffffu, sum, offset);
  if (threadIdx.x == 0) p.dbias[k] = sum;
}

}  // namespace

void pool_linear_backward(const PoolLinearBackward& p, DType dtype, cuda::StreamHandle stream) {
  if (p.n == 0) return;
  const std::int64_t runs = (p.channels + kGradChannels - 1) / kGradChannels;
  const auto blocks = static_cast<unsigned>(p.n + p.classes * runs);
  if (dtype == DType::f32) pool_linear_backward_kernel<float><<<blocks, kThreads, 0, stream>>>(p);
  else pool_linear_backward_kernel<__nv_bfloat16><<<blocks, kThreads, 0, stream>>>(p);
  TANDEM_CUDA_CHECK(cudaGetLastError());
}

bool pool_linear_supports(std::int64_t pixels, std::int64_t channels, std::int64_t classes) {
  return pixels >= 1 && pixels < (std::int64_t{1} << 31) / kMaxPoolLinearChannels && channels >= 1 &&
         channels <= kMaxPoolLinearChannels && classes >= 1 && classes < (std::int64_t{1} << 31);
}

void pool_linear(const PoolLinear& p, DType dtype, cuda::StreamHandle stream) {
  if (p.n == 0) return;
  const auto blocks = static_cast<unsigned>(p.n);
  if (dtype == DType::f32) pool_linear_kernel<float><<<blocks, kThreads, 0, stream>>>(p);
  else pool_linear_kernel<__nv_bfloat16><<<blocks, kThreads, 0, stream>>>(p);
  TANDEM_CUDA_CHECK(cudaGetLastError());
}

bool conv3x3_relu_pool2_supports(std::int64_t in_channels, std::int64_t out_channels, std::int64_t height,
                                 std::int64_t width) {
  return in_channels >= 1 && in_channels <= kMaxInChannels &&
         (out_channels == 8 || out_channels == 16 || out_channels == kMaxOutChannels) && height >= 2 && width >= 2 &&
         height % 2 == 0 && width % 2 == 0;
}

void conv3x3_relu_pool2(const ConvReluPool& c, DType dtype, cuda::StreamHandle stream) {
  const Params p{.x = c.x,
                 .stride_n = c.stride_n,
                 .stride_c = c.stride_c,
                 .stride_h = c.stride_h,
                 .stride_w = c.stride_w,
                 .height = static_cast<int>(c.height),
                 .width = static_cast<int>(c.width),
                 .pooled_h = static_cast<int>(c.height / 2),
                 .pooled_w = static_cast<int>(c.width / 2),
                 .pixels = c.n * (c.height / 2) * (c.width / 2),
                 .weight = c.weight,
                 .bias = c.bias,
                 .out = c.out};
  if (p.pixels == 0) return;
  const auto in = static_cast<int>(c.in_channels), out = static_cast<int>(c.out_channels);
  if (dtype == DType::f32) launch_conv<float>(p, in, out, stream);
  else launch_conv<__nv_bfloat16>(p, in, out, stream);
  TANDEM_CUDA_CHECK(cudaGetLastError());
}

void max_pool2_nhwc(const void* x, void* out, std::int64_t n, std::int64_t height, std::int64_t width,
                    std::int64_t channels, DType dtype, cuda::StreamHandle stream) {
  const std::int64_t element = dtype == DType::f32 ? 4 : 2;
  const auto per_pixel = static_cast<int>(channels * element / 16);
  const std::int64_t vectors = n * (height / 2) * (width / 2) * per_pixel;
  if (vectors == 0) return;
  const auto blocks = static_cast<unsigned>((vectors + kThreads - 1) / kThreads);
  const auto ph = static_cast<int>(height / 2), pw = static_cast<int>(width / 2);
  if (dtype == DType::f32)
    max_pool2_nhwc_kernel<float><<<blocks, kThreads, 0, stream>>>(static_cast<const float*>(x),
                                                                  static_cast<float*>(out), vectors, ph, pw, per_pixel);
  else
    max_pool2_nhwc_kernel<__nv_bfloat16><<<blocks, kThreads, 0, stream>>>(
        static_cast<const __nv_bfloat16*>(x), static_cast<__nv_bfloat16*>(out), vectors, ph, pw, per_pixel);
  TANDEM_CUDA_CHECK(cudaGetLastError());
}

}  // namespace tandem::conv_pool_kernels
