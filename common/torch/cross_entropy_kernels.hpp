// CUDA kernels for a classifier's training loss (cross_entropy.hpp is the LibTorch-facing side).
// Torch-free, built by nvcc where LibTorch has CUDA (TANDEM_GPU_KERNELS).
//
// ATen's cross-entropy with the step's accuracy is about ten small launches per step (log_softmax
// and nll_loss forward, their backwards and a fill, argmax, eq and a sum for the correct count), each
// a few microseconds on rows of 10 logits. Here the forward is one block: each thread takes rows
// (their maximum, log-sum-exp, loss and whether the first maximum is the label), the block sums
// them in a fixed order and writes the mean loss and the count, keeping each row's log-sum-exp for
// the backward. The backward is one elementwise launch: dlogits = (softmax - onehot) * dloss / N.
// Both are the same bits on every run. A label outside [0, classes) makes the loss NaN (ATen would
// stop the process with a device-side assert). Each call enqueues on `stream` and never synchronises.
#pragma once

#include <cstdint>

#include "common/cuda.hpp"

namespace tandem::cross_entropy_kernels {

// The most logits (N x classes) one block takes; larger batches go to ATen's kernels.
inline constexpr std::int64_t kMaxLogits = std::int64_t{1} << 18;

struct CrossEntropy {
  const float* logits = nullptr;         // float32 [N, classes], contiguous
  const std::int64_t* labels = nullptr;  // int64 [N]
  std::int64_t n = 0, classes = 0;
  float* loss = nullptr;            // float32 0-dim: the mean over the batch
  std::int64_t* correct = nullptr;  // int64 0-dim
  float* log_sum_exp = nullptr;     // float32 [N]: kept for the backward
};

struct CrossEntropyBackward {
  const float* logits = nullptr;
  const std::int64_t* labels = nullptr;
  const float* log_sum_exp = nullptr;  // the forward's
  const float* dloss = nullptr;        // float32 0-dim
  std::int64_t n = 0, classes = 0;
  float* dlogits = nullptr;  // float32 [N, classes]
};

void cross_entropy_forward(const CrossEntropy& p, cuda::StreamHandle stream);
void cross_entropy_backward(const CrossEntropyBackward& p, cuda::StreamHandle stream);

}  // namespace tandem::cross_entropy_kernels
