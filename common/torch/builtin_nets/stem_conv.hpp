// A network's first convolution on the GPU: conv3x3 (padding 1, stride 1, no bias) over
// an image's 1-4 channels, forward and weight gradient through Tandem's kernels
// (stem_conv_kernels.hpp says why), an autograd op.
//
//   if (stem_conv_applies(x, w, stride, padding)) y = stem_conv3x3(x, w);
//   if (stem_conv_applies(x, w, stride, padding)) y = stem_conv3x3_bias_relu(x, w, b);  // evaluation
//
// Applies to channels-last contiguous CUDA tensors of one dtype (float32 or bfloat16): x [N, C, H, W]
// with C <= 4, w [K, C, 3, 3] with K 32 or 64, stride 1 and padding 1, in a build with the GPU
// kernels; elsewhere the caller runs ATen's convolution. The input's gradient, where one is wanted,
// comes from ATen's (an image rarely wants one).
// Exactness: float32 FMAs (no TF32) in another order than cuDNN's, so within rounding of a float32
// convolution; the weight gradient is the same bits on every run.
// Threads: the caller's; kernels go on the current CUDA stream.
#pragma once

#include <torch/types.h>

namespace tandem {

bool stem_conv_applies(const torch::Tensor& x, const torch::Tensor& w, at::IntArrayRef stride, at::IntArrayRef padding);
torch::Tensor stem_conv3x3(const torch::Tensor& x, const torch::Tensor& w);

// relu(conv3x3(x, w) + bias), bias [K] of w's dtype, for a folded evaluation (cuDNN's bias-ReLU
// convolution runs a generic kernel there too, measured: docs/results/HISTORY.md). No gradient.
torch::Tensor stem_conv3x3_bias_relu(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& bias);

}  // namespace tandem
