// HostFeed: batches from a dataset cache in shared memory, gathered by CPU worker threads.
//
// Pipeline. Worker threads (ring_workers.hpp) claim steps in order and gather their samples
// (per-sample memcpy straight from the cache mapping) into a ring of `ring_slots` staging slots
// (slot_ring.hpp); a step is split into chunks of kChunkSamples so that every worker helps with every
// step. What a slot holds and how it becomes batches is the staging's (host_staging.hpp):
//  - On a GPU the slots are pinned (cudaHostAlloc). The worker that finishes a slot enqueues its
//    H2D copy on the feed's copy stream and records the slot's `copied` event. next() makes the
//    caller's current stream wait for that event, then converts the samples to float and normalises on the
//    GPU into fresh allocations (one per consumer), and records the slot's `consumed` event. A
//    worker refills a slot's pinned memory only after `copied` has completed (cudaEventSynchronize),
//    and the copy stream overwrites a slot's device staging only after `consumed` (a GPU-side wait),
//    so no buffer is rewritten while a copy or a kernel may still read it, and the host never waits
//    for the training stream.
//  - On the CPU the workers convert and normalise while gathering, straight into the slot, and the
//    returned tensors are views of the slot whose deleters hand it back: a slot is reused only after
//    every tensor (and view) of its step is gone. Hold at most ring_slots - 1 steps, or next() waits.
//
// Threads: one consumer thread calls next(); the returned tensors may be released on any thread.
// Construction starts the workers; destruction stops and joins them and waits for the feed's own
// GPU work. The cache must outlive the feed. Errors in a worker are rethrown by next().
#pragma once

#include <cstdint>
#include <memory>

#include "learner/feed/batch.hpp"
#include "learner/feed/feed_options.hpp"

namespace tandem::feed {

inline constexpr std::uint64_t kChunkSamples = 64;

class HostFeed {
 public:
  HostFeed(const shm::DatasetCache& cache, const FeedOptions& options, std::uint64_t first_epoch = 0);
  ~HostFeed();
  HostFeed(HostFeed&&) noexcept;
  HostFeed& operator=(HostFeed&&) noexcept;

  std::uint64_t length() const;  // steps per epoch
  bool on_gpu() const;
  const EpochSampler& sampler() const;
  const FeedLayout& layout() const;

  Step next();  // blocks until the next step is staged

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tandem::feed
