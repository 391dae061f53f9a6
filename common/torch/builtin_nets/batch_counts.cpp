#include "common/torch/builtin_nets/batch_counts.hpp"

#include <ATen/Functions.h>

#include <unordered_set>

namespace tandem {

using torch::Tensor;

namespace {
thread_local BatchCounts* innermost_counts = nullptr;
}  // namespace

BatchCounts::BatchCounts() : outer_(innermost_counts) { innermost_counts = this; }
BatchCounts::~BatchCounts() { innermost_counts = outer_; }

void BatchCounts::apply() {
  // One foreach launch adds once per distinct tensor (a tensor listed twice races with itself), so a
  // BatchNorm run twice in the scope has its further counts added on their own.
  std::vector<Tensor> distinct;
  std::unordered_set<const void*> seen;
  for (const Tensor& t : counters_) {
    if (seen.insert(t.data_ptr()).second) distinct.push_back(t);
    else t.add_(1);
  }
  if (!distinct.empty()) torch::_foreach_add_(distinct, 1);
  counters_.clear();
}

void BatchCounts::count(const Tensor& num_batches_tracked) {
  if (innermost_counts != nullptr) innermost_counts->counters_.push_back(num_batches_tracked);
  else num_batches_tracked.add_(1);
}

}  // namespace tandem
