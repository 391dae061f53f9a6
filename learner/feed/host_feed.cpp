#include "learner/feed/host_feed.hpp"

#include <algorithm>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "common/cuda.hpp"
#include "common/error.hpp"
#include "learner/feed/host_staging.hpp"
#include "learner/feed/ring_workers.hpp"
#include "learner/feed/slot_ring.hpp"

namespace tandem::feed {
namespace {

bool choose_gpu(const FeedOptions& o) {
  if (o.placement == Placement::cpu) return false;
  const int visible = cuda::device_count();
#ifdef TANDEM_TORCH_CUDA
  if (o.placement == Placement::automatic && visible == 0) return false;
  if (visible == 0) fail("HostFeed placement cuda needs a GPU and none is visible: use placement cpu or automatic");
  if (static_cast<int>(o.device_index) >= visible)
    fail("HostFeed device_index {} is out of range: {} GPUs are visible", o.device_index, visible);
  return true;
#else
  if (o.placement == Placement::automatic) return false;
  fail(
      "HostFeed placement cuda needs LibTorch with CUDA ({} GPUs visible, this build's LibTorch is CPU-only): "
      "use placement cpu or rebuild against LibTorch with CUDA",
      visible);
#endif
}

unsigned worker_count(const FeedOptions& o) {
  return o.workers > 0 ? o.workers : std::clamp(std::thread::hardware_concurrency(), 1u, 8u);
}

// Epoch orders are computed once and shared by the workers; the last few are kept because
// workers run up to ring_slots steps ahead of the consumer, possibly into the next epoch.
class EpochOrders {
 public:
  explicit EpochOrders(const EpochSampler& sampler) : sampler_(sampler) {}

  std::shared_ptr<const std::vector<std::uint64_t>> of(std::uint64_t epoch) {
    std::lock_guard lock(mu_);
    for (auto& [e, order] : orders_)
      if (e == epoch) return order;
    auto order = std::make_shared<const std::vector<std::uint64_t>>(sampler_.epoch_order(epoch));
    if (orders_.size() == 3) orders_.erase(orders_.begin());
    orders_.emplace_back(epoch, order);
    return order;
  }

 private:
  const EpochSampler& sampler_;
  std::mutex mu_;
  std::vector<std::pair<std::uint64_t, std::shared_ptr<const std::vector<std::uint64_t>>>> orders_;
};

}  // namespace

struct HostFeed::Impl {
  FeedOptions options;
  FeedLayout layout;
  EpochSampler sampler;
  std::uint64_t first_epoch;
  bool gpu;
  std::uint64_t step_samples;
  EpochOrders orders{sampler};
  std::shared_ptr<SlotRing> ring;
  std::unique_ptr<HostStaging> staging;
  RingWorkers workers;  // declared last: stopped and joined before anything they use goes
  std::uint64_t take_step = 0;

  Impl(const shm::DatasetCache& cache, const FeedOptions& o, std::uint64_t first)
      : options(o),
        layout(describe_feed(cache, o)),
        sampler(make_feed_sampler(layout, o)),
        first_epoch(first),
        gpu(choose_gpu(o)),
        step_samples(o.batch_size * o.consumers),
        ring(make_ring()),
        staging(make_staging()),
        workers(*ring, worker_count(o),
                {.prepare = [this] { staging->prepare_worker(); },
                 .fill = [this](const SlotRing::Chunk& c) { fill(c); },
                 .seal = [this](const SlotRing::Chunk& c) { staging->seal(c.slot, c.step_items); }}) {}

  std::uint64_t epoch_of(std::uint64_t s) const { return first_epoch + s / sampler.length(); }
  std::uint64_t index_of(std::uint64_t s) const { return s % sampler.length(); }
  std::uint64_t samples_of(std::uint64_t s) const { return sampler.batch_samples(index_of(s)); }

  // Checked here, before the staging slots and the workers exist.
  std::shared_ptr<SlotRing> make_ring() const {
    if (options.ring_slots < 2 || options.ring_slots > kMaxStagingSlots)
      fail("HostFeed ring_slots={} is out of range: use 2..{} (one step staged while one is consumed)",
           options.ring_slots, kMaxStagingSlots);
    if (options.workers > kMaxFeedWorkers)
      fail("HostFeed workers={} is out of range: use 0..{} (0: one per core, at most 8)", options.workers,
           kMaxFeedWorkers);
    return std::make_shared<SlotRing>(options.ring_slots, kChunkSamples,
                                      [this](std::uint64_t s) { return samples_of(s); });
  }

  std::unique_ptr<HostStaging> make_staging() const {
#ifdef TANDEM_TORCH_CUDA
    if (gpu) return make_pinned_staging(ring, layout, options, step_samples);
#endif
    return make_cpu_staging(ring, layout, options, step_samples);
  }

  void fill(const SlotRing::Chunk& chunk) {
    auto order = orders.of(epoch_of(chunk.step));
    staging->fill(chunk.slot, order->data() + index_of(chunk.step) * step_samples, chunk.begin, chunk.end);
  }

  Step next() {
    const std::uint64_t s = take_step++;
    Step step{epoch_of(s), index_of(s), {}};
    step.batches = staging->take(s, samples_of(s));
    return step;
  }
};

HostFeed::HostFeed(const shm::DatasetCache& cache, const FeedOptions& options, std::uint64_t first_epoch)
    : impl_(std::make_unique<Impl>(cache, options, first_epoch)) {}
HostFeed::~HostFeed() = default;
HostFeed::HostFeed(HostFeed&&) noexcept = default;
HostFeed& HostFeed::operator=(HostFeed&&) noexcept = default;

std::uint64_t HostFeed::length() const { return impl_->sampler.length(); }
bool HostFeed::on_gpu() const { return impl_->gpu; }
const EpochSampler& HostFeed::sampler() const { return impl_->sampler; }
const FeedLayout& HostFeed::layout() const { return impl_->layout; }
Step HostFeed::next() { return impl_->next(); }

}  // namespace tandem::feed
