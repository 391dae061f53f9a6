// CUDA kernels for pooling layers fused with their neighbours: a folded evaluation's conv-ReLU-max-pool
// blocks, and a classifier head's average pool + linear layer, forward and backward (conv_pool.hpp
// is the LibTorch-facing side). Torch-free, built by nvcc where LibTorch has CUDA (TANDEM_GPU_KERNELS).
//
// conv3x3_relu_pool2: a network's first block, conv3x3 (padding 1, stride 1, BatchNorm folded into
//   its weight and bias) -> ReLU -> 2x2 max-pool, in one pass. With 1-4 input channels cuDNN pads the
//   channels, converts the layout and writes the full-size activation that the pool then reads back:
//   three kernels and ~4x the pooled output's bytes. Here each thread reads its 4x4 input window once,
//   in any layout, keeps the four convolution outputs of each channel in registers and writes only the
//   pooled, channels-last result. relu(max(a) + b) == max(relu(a + b)): the bias and the ReLU go after
//   the max.
// max_pool2_nhwc: a 2x2 max-pool of a channels-last activation with a multiple of 8 channels, read
//   and written as 16-byte vectors (ATen's channels-last pool reads one element per thread).
// pool_linear: a classifier head, the global average pool and the linear layer after it, in one
//   launch with float32 logits (ATen: a reduction, cuBLAS's split-K GEMM for [N, C] x [C, classes]
//   and its memset; measured: docs/results/HISTORY.md, "Our kernels"). A block per
//   image: its threads average the image's pixels per channel into shared memory, then each warp
//   takes classes, a dot product over the channels. Its backward is one more launch
//   (pool_linear_backward: ATen's is two GEMMs, a reduction for the bias and the pool's broadcast):
//   a block per image writes its input gradient, a block per class and run of 64 channels its
//   weight gradient from the means the forward kept (and the bias's).
// The max-pools propagate NaN as ATen's does. Everything accumulates in float32. Each call
// enqueues on `stream` and never synchronises.
#pragma once

#include <cstdint>

#include "common/cuda.hpp"

namespace tandem::conv_pool_kernels {

enum class DType { f32, bf16 };

struct ConvReluPool {
  const float* x = nullptr;  // float32 [N, C, H, W] with any strides (in elements)
  std::int64_t n = 0, in_channels = 0, height = 0, width = 0;
  std::int64_t stride_n = 0, stride_c = 0, stride_h = 0, stride_w = 0;
  const void* weight = nullptr;  // dtype [O, 3, 3, C]: the folded, channels-last weight
  const void* bias = nullptr;    // dtype [O]
  std::int64_t out_channels = 0;
  void* out = nullptr;  // dtype [N, H/2, W/2, O]: channels-last
};

// Whether conv3x3_relu_pool2 takes these sizes: 1-4 input channels, 8, 16 or 32 output channels,
// an even height and width.
bool conv3x3_relu_pool2_supports(std::int64_t in_channels, std::int64_t out_channels, std::int64_t height,
                                 std::int64_t width);
void conv3x3_relu_pool2(const ConvReluPool& p, DType dtype, cuda::StreamHandle stream);

// x: dtype [N, H, W, C] contiguous (channels-last), C % 8 == 0, H and W even; out: [N, H/2, W/2, C].
void max_pool2_nhwc(const void* x, void* out, std::int64_t n, std::int64_t height, std::int64_t width,
                    std::int64_t channels, DType dtype, cuda::StreamHandle stream);

struct PoolLinear {
  const void* x = nullptr;  // dtype [N, pixels, C]: a channels-last activation
  std::int64_t n = 0, pixels = 0, channels = 0;
  const float* weight = nullptr;  // float32 [classes, C]
  const float* bias = nullptr;    // float32 [classes], or null
  std::int64_t classes = 0;
  float* logits = nullptr;  // float32 [N, classes]
  float* means = nullptr;   // float32 [N, C]: the pooled means, kept for the backward; or null
};

struct PoolLinearBackward {
  const float* dlogits = nullptr;  // float32 [N, classes]
  const float* weight = nullptr;   // float32 [classes, C]
  const float* means = nullptr;    // float32 [N, C]: the forward's
  std::int64_t n = 0, pixels = 0, channels = 0, classes = 0;
  void* dx = nullptr;        // dtype [N, pixels, C]: channels-last
  float* dweight = nullptr;  // float32 [classes, C]
  float* dbias = nullptr;    // float32 [classes], or null
};

// Whether pool_linear takes these sizes: at least one of each, and at most 8192 channels (their
// means are held in a block's shared memory).
bool pool_linear_supports(std::int64_t pixels, std::int64_t channels, std::int64_t classes);
void pool_linear(const PoolLinear& p, DType dtype, cuda::StreamHandle stream);
void pool_linear_backward(const PoolLinearBackward& p, DType dtype, cuda::StreamHandle stream);

}  // namespace tandem::conv_pool_kernels
