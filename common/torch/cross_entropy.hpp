// A classifier's training loss and accuracy from one pass over the logits.
//
//   auto [loss, correct] = cross_entropy_and_correct(logits, y);
//   loss.backward();   // or autograd::grad({loss}, ...)
//
// loss: the mean cross-entropy of float32 logits [N, classes] against int64 labels [N], as
// torch::nn::functional::cross_entropy computes it (a 0-dim float32, differentiable with respect to
// the logits); correct: how many rows' first maximum is their label (a 0-dim int64, not
// differentiable). On the GPU, for contiguous float32 CUDA logits of at most
// cross_entropy_kernels::kMaxLogits values in a build with the kernels, one launch forward and one backward
// (cross_entropy_kernels.hpp says why); elsewhere ATen's cross-entropy, argmax, eq and sum. Values: ATen's to
// rounding (the same sums in another order). A label outside [0, classes) makes the GPU loss NaN.
// Threads: the caller's; kernels go on the current CUDA stream, nothing waits for the device.
#pragma once

#include <torch/types.h>

#include <utility>

namespace tandem {

std::pair<torch::Tensor, torch::Tensor> cross_entropy_and_correct(const torch::Tensor& logits, const torch::Tensor& y);

}  // namespace tandem
