// Counting BatchNorm's batches in one launch per step, for both fused BatchNorm backends (bn_act.hpp's
// kernels count in place; cuDNN's, bn_act_cudnn.hpp, cannot). Its own file so that neither backend
// includes the other: bn_act.cpp picks a backend, both count here.
#pragma once

#include <torch/types.h>

#include <vector>

namespace tandem {

// Counts the batch (num_batches_tracked += 1) of every bn_act in its scope on this thread with one
// launch, at apply(), where a fused path would otherwise launch a small add per BatchNorm (cuDNN's;
// Tandem's kernels count in place): 20 of a ResNet-18 step's launches (docs/results/HISTORY.md, "Our kernels").
//   BatchCounts counts;  Tensor h = ...bn_act(...)...;  counts.apply();
// A scope left without apply() (an exception) counts nothing: the step failed. Scopes nest; each
// collects what runs while it is the innermost. Threads: the creating thread's, as bn_act's.
class BatchCounts {
 public:
  BatchCounts();
  ~BatchCounts();
  BatchCounts(const BatchCounts&) = delete;
  BatchCounts& operator=(const BatchCounts&) = delete;
  void apply();
  // For the fused paths: counts `num_batches_tracked` now, or at the innermost scope's apply().
  static void count(const torch::Tensor& num_batches_tracked);

 private:
  std::vector<torch::Tensor> counters_;
  BatchCounts* outer_;
};

}  // namespace tandem
