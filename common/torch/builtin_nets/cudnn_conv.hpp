// Convolutions through cuDNN's graph API (cudnn_graph.hpp), where ATen's do not do what a step
// needs. Today one: a residual block's input gradient without the add.
//
//   auto [y, x_again] = conv2d_sharing_input(x, w, stride, padding);   // y = conv2d(x, w)
//   ... use x_again, not x, wherever else the block reads its input (shortcut, downsample) ...
//
// Why: a block's input x feeds its first convolution and its shortcut, so autograd sums two
// gradients for x: an add kernel reading both and writing a third tensor, 3 passes over every
// block input (measured: docs/results/HISTORY.md, "Our kernels against what ATen and cuDNN ran").
// Handing the shortcut `x_again`, a second output of this op, makes autograd bring the shortcut's
// gradient to this op's backward, which has cuDNN blend its data gradient into that tensor
// (conv_dgrad_accumulate, beta = 1): the sum costs one extra read inside the dgrad kernel.
// The blend writes into the gradient autograd hands over, so it is taken only where that tensor is
// provably this op's alone (no other reference to it or its storage: the fused BatchNorm and ATen's
// convolutions make fresh ones); otherwise, and wherever cuDNN has no engine for the blend, it
// adds as autograd would. Values: the same sum, up to the order of two float additions.
//
// conv_dgrad_accumulate: dx += dgrad(dy, w) for a 2-D convolution with dilation 1 and one group,
// channels-last contiguous float32 or bfloat16 CUDA tensors. The plan per shape is made on first
// use: cuDNN's heuristics' candidates, timed (on scratch memory) unless the stream is being
// captured, when the heuristics' first is taken. False: this build or this cuDNN cannot.
// Threads: any (the plan cache is locked); work goes on the current CUDA stream, nothing waits
// for the device except the one-time timing.
#pragma once

#include <torch/types.h>

#include <array>
#include <tuple>
#include <utility>

namespace tandem {

// ATen's backward of a 2-D convolution with dilation 1, one group and no bias: (dx, dw, -) where
// `mask` asks for them. The one spelling of at::convolution_backward's ten arguments here.
std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> conv_backward(const torch::Tensor& dy, const torch::Tensor& x,
                                                                      const torch::Tensor& w, at::IntArrayRef stride,
                                                                      at::IntArrayRef padding,
                                                                      std::array<bool, 3> mask);

std::pair<torch::Tensor, torch::Tensor> conv2d_sharing_input(const torch::Tensor& x, const torch::Tensor& w,
                                                             at::IntArrayRef stride, at::IntArrayRef padding);

bool conv_dgrad_accumulate(const torch::Tensor& dy, const torch::Tensor& w, const torch::Tensor& dx,
                           at::IntArrayRef stride, at::IntArrayRef padding);

}  // namespace tandem
