#include "learner/feed/batch_pool.hpp"

#include <algorithm>

namespace tandem::feed {
namespace {

// Only the pool holds this tensor: no other tensor or Python object shares its TensorImpl (use_count),
// nothing can revive it (weak_use_count counts weak references plus one for the strong ones), and no
// view shares its memory (a view is another TensorImpl over the same storage).
bool only_the_pools(const torch::Tensor& t) {
  return t.use_count() == 1 && t.weak_use_count() == 1 && t.storage().use_count() == 1;
}

bool is_free(const Batch& b) { return only_the_pools(b.x) && only_the_pools(b.y); }

bool same_kind(const torch::Tensor& t, at::IntArrayRef shape, const torch::TensorOptions& options) {
  return t.sizes() == shape && t.dtype() == options.dtype() && t.device() == options.device();
}

}  // namespace

Batch BatchPool::take(at::IntArrayRef x_shape, const torch::TensorOptions& x_options, at::IntArrayRef y_shape,
                      const torch::TensorOptions& y_options, std::uintptr_t stream) {
  const auto fits = [&](const Entry& e) {
    return e.stream == stream && same_kind(e.batch.x, x_shape, x_options) && same_kind(e.batch.y, y_shape, y_options);
  };
  for (const Entry& e : entries_)
    if (fits(e) && is_free(e.batch)) return e.batch;

  Batch fresh{torch::empty(x_shape, x_options), torch::empty(y_shape, y_options)};
  if (entries_.size() < capacity_) {
    entries_.push_back({fresh, stream});
  } else {
    // A free batch of another shape (an epoch's short last step) or stream gives its place up.
    const auto stale = std::find_if(entries_.begin(), entries_.end(), [](const Entry& e) { return is_free(e.batch); });
    if (stale != entries_.end()) *stale = {fresh, stream};
  }
  return fresh;
}

}  // namespace tandem::feed
