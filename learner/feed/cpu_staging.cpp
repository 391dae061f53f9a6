// HostStaging on the CPU (host_staging.hpp): float slots whose tensors release them.
#include <utility>

#include "learner/feed/host_staging.hpp"
#include "learner/feed/sample_gather.hpp"

namespace tandem::feed {
namespace {

// Shared with the deleters of the tensors handed out: a tensor released after the feed is gone
// still finds its ring, and keeps the memory it views alive.
struct CpuSlots {
  std::shared_ptr<SlotRing> ring;
  std::vector<std::unique_ptr<float[]>> x;         // converted samples
  std::vector<std::unique_ptr<std::int64_t[]>> y;  // targets' bytes (int64 or float32), 8-byte aligned
};

class CpuStaging final : public HostStaging {
 public:
  CpuStaging(std::shared_ptr<SlotRing> ring, const FeedLayout& layout, const FeedOptions& options,
             std::uint64_t step_samples)
      : layout_(layout), consumers_(options.consumers), slots_(std::make_shared<CpuSlots>()) {
    for (std::size_t k = 0; k < ring->size(); ++k) {
      slots_->x.push_back(std::make_unique_for_overwrite<float[]>(step_samples * layout.x_elements));
      slots_->y.push_back(std::make_unique_for_overwrite<std::int64_t[]>((step_samples * layout.y_stride + 7) / 8));
    }
    slots_->ring = std::move(ring);
  }

  void prepare_worker() override {}

  // Gather and normalise in one pass, straight into the slot.
  void fill(std::size_t slot, const std::uint64_t* rows, std::uint64_t begin, std::uint64_t end) override {
    gather_normalized(layout_, rows, begin, end, slots_->x[slot].get(), targets(slot));
  }

  void seal(std::size_t, std::uint64_t) override {}

  // Every non-empty batch is two tensors, each holding the slot until it (and its views) is gone.
  std::vector<Batch> take(std::uint64_t step, std::uint64_t n) override {
    std::uint32_t holders = 0;
    for (std::uint32_t c = 0; c < consumers_; ++c)
      if (consumer_begin(n, c + 1, consumers_) > consumer_begin(n, c, consumers_)) holders += 2;
    const std::size_t k = slots_->ring->take(step, holders);

    const torch::ScalarType y_type = target_dtype(layout_);
    std::vector<Batch> batches;
    batches.reserve(consumers_);
    for (std::uint32_t c = 0; c < consumers_; ++c) {
      const std::uint64_t begin = consumer_begin(n, c, consumers_), end = consumer_begin(n, c + 1, consumers_);
      const auto m = static_cast<std::int64_t>(end - begin);
      if (m == 0) {
        batches.push_back(
            {torch::empty(layout_.batch_shape(0), torch::kFloat), torch::empty(layout_.y_batch_shape(0), y_type)});
        continue;
      }
      auto release = [slots = slots_, k](void*) { slots->ring->release(k); };
      batches.push_back(
          {torch::from_blob(slots_->x[k].get() + begin * layout_.x_elements, layout_.batch_shape(end - begin), release,
                            torch::TensorOptions().dtype(torch::kFloat)),
           torch::from_blob(targets(k) + begin * layout_.y_stride, layout_.y_batch_shape(end - begin), release,
                            torch::TensorOptions().dtype(y_type))});
    }
    return batches;
  }

 private:
  std::byte* targets(std::size_t slot) const { return reinterpret_cast<std::byte*>(slots_->y[slot].get()); }

  const FeedLayout& layout_;
  const std::uint32_t consumers_;
  std::shared_ptr<CpuSlots> slots_;
};

}  // namespace

std::unique_ptr<HostStaging> make_cpu_staging(std::shared_ptr<SlotRing> ring, const FeedLayout& layout,
                                              const FeedOptions& options, std::uint64_t step_samples) {
  return std::make_unique<CpuStaging>(std::move(ring), layout, options, step_samples);
}

}  // namespace tandem::feed
