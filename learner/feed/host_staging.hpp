// HostStaging: the memory behind HostFeed's SlotRing, what its workers write there and how next()
// turns a staged step into batches (the pipeline and its event protocol: host_feed.hpp). Two kinds:
//  - CPU (make_cpu_staging): float slots, filled already normalised; take() hands out tensors that
//    view the slot and release it from their deleters, which also keep the slots' memory alive, so
//    batches may outlive the feed.
//  - Pinned (make_pinned_staging, only where LibTorch has CUDA): raw bytes in pinned slots; seal()
//    enqueues the step's H2D copy, take() converts on the GPU (GpuNormalizer) into fresh allocations.
//    Destruction waits for the staging's own GPU work.
//
// Threads: prepare_worker, fill and seal are called by RingWorkers' threads (fill concurrently for
// disjoint ranges); take by the feed's one consumer thread. Destroy the workers first.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "learner/feed/batch.hpp"
#include "learner/feed/feed_options.hpp"
#include "learner/feed/slot_ring.hpp"

namespace tandem::feed {

class HostStaging {
 public:
  virtual ~HostStaging() = default;

  virtual void prepare_worker() = 0;  // once per worker thread, before its first fill
  // Slot entries [begin, end) get cache rows rows[begin..end).
  virtual void fill(std::size_t slot, const std::uint64_t* rows, std::uint64_t begin, std::uint64_t end) = 0;
  virtual void seal(std::size_t slot, std::uint64_t samples) = 0;  // the step's last chunk is filled
  // Blocks until `step` (of `samples` samples) is staged; one batch per consumer.
  virtual std::vector<Batch> take(std::uint64_t step, std::uint64_t samples) = 0;
};

// Slots hold `step_samples` samples each; the layout must outlive the staging (not its batches).
std::unique_ptr<HostStaging> make_cpu_staging(std::shared_ptr<SlotRing> ring, const FeedLayout& layout,
                                              const FeedOptions& options, std::uint64_t step_samples);
std::unique_ptr<HostStaging> make_pinned_staging(std::shared_ptr<SlotRing> ring, const FeedLayout& layout,
                                                 const FeedOptions& options, std::uint64_t step_samples);

}  // namespace tandem::feed
