// CUDA kernels for a network's first convolution in training, over an image's few channels
// (stem_conv.hpp is the LibTorch-facing side). Torch-free, built by nvcc where LibTorch has CUDA
// (TANDEM_GPU_KERNELS).
//
// A conv3x3 (padding 1, stride 1, no bias) over 1-4 input channels is too thin for cuDNN's
// tensor-core kernels: it runs generic ones (measured: docs/results/HISTORY.md, "Our kernels against what
// ATen and cuDNN ran"), for work that is a write of the output (forward) or a read of
// the output's gradient (weight gradient). Here a block covers a run of 4 image rows for every
// output channel, each thread 4 x 8 consecutive pixels of one channel, so each input value read from
// the block's shared patch serves 3 taps x 8 outputs of up to 3 rows from registers:
//   forward:     the thread's filter in registers, the channels-last output written in order;
//   weight_grad: each thread sums dy x input-neighbourhood into 9C registers over the runs of its
//                block, the block writes one float32 partial, a second kernel adds the partials in
//                block order. No atomics: the same bits on every run (a captured and an eager step
//                stay equal).
// Both accumulate in float32 with plain FMAs (no TF32). Each call enqueues on `stream` and never
// synchronises.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/cuda.hpp"

namespace tandem::stem_conv_kernels {

enum class DType { f32, bf16 };

struct Shape {
  std::int64_t n = 0, height = 0, width = 0;
  std::int64_t in_channels = 0;   // C: 1 to 4
  std::int64_t out_channels = 0;  // K: 32 or 64 (the run length and patch are compile-time per K)
};

// Whether the kernels take this shape.
bool supports(const Shape& s);

// What the forward adds after the convolution: a folded evaluation's bias (dtype [K]) and ReLU.
struct Epilogue {
  const void* bias = nullptr;  // null: none
  bool relu = false;
};

// y [N, H, W, K] = epilogue(conv3x3(x [N, H, W, C], w [K, 3, 3, C])): all dtype, contiguous as written.
void forward(const void* x, const void* w, const Epilogue& e, void* y, const Shape& s, DType dtype,
             cuda::StreamHandle stream);

// dw [K, 3, 3, C] (dtype) = the weight gradient from x and dy [N, H, W, K]; `workspace` holds
// weight_grad_workspace_bytes(s) of float32 partials.
std::size_t weight_grad_workspace_bytes(const Shape& s);
void weight_grad(const void* x, const void* dy, void* dw, void* workspace, const Shape& s, DType dtype,
                 cuda::StreamHandle stream);

}  // namespace tandem::stem_conv_kernels
