// SlotRing: the states of a ring of staging slots that worker threads fill step by step and one
// consumer takes in step order. Torch-free: it hands out slot indices; the memory behind a slot
// belongs to its owner (HostFeed's staging).
//
// A step of items_of(step) items goes to slot step % size(). Workers claim it in chunks of
// chunk_items items, so that every worker helps with every step. A slot moves
//   free -> filling (first chunk claimed) -> ready (last chunk finished, then mark_ready)
//        -> held (take, by `holders` holders) -> free (the last holder's release)
// and workers claim the chunks of the next step only once its slot is free: a slot is never
// refilled while anything still holds it.
//
// Threads: workers call claim / finish / mark_ready / fail; one consumer thread calls take with
// steps 0, 1, 2, ...; release may come from any thread, also after the ring's owner has moved on
// (share the ring through a shared_ptr for that). stop() may be called from any thread. Every
// method but size() locks the ring's one mutex (the members it guards say GUARDED_BY): a worker's
// writes into a slot happen before mark_ready, and the consumer reads them after take, so the
// mutex's release/acquire orders the slot's memory too.
// Misuse (finishing a chunk twice, releasing a free slot) is not detected.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <optional>
#include <vector>

#include "common/thread_annotations.hpp"

namespace tandem::feed {

class SlotRing {
 public:
  struct Chunk {
    std::uint64_t step = 0;
    std::size_t slot = 0;
    std::uint64_t begin = 0, end = 0;  // items [begin, end) of the step
    std::uint64_t step_items = 0;      // items_of(step)
  };

  // items_of(step) must be > 0; it is called under the ring's lock, so it must not call the ring.
  SlotRing(std::size_t slots, std::uint64_t chunk_items, std::function<std::uint64_t(std::uint64_t)> items_of);

  std::size_t size() const { return slots_count_; }

  // Workers. claim() blocks until the next chunk can be claimed; nullopt once the ring is stopped.
  std::optional<Chunk> claim();
  // True for the step's last chunk: its worker then completes the slot and calls mark_ready.
  [[nodiscard]] bool finish(const Chunk& chunk);
  void mark_ready(std::size_t slot);
  // The first error is kept and rethrown by take(); the ring stops.
  void fail(std::exception_ptr error);

  // Consumer: blocks until `step` is ready and returns its slot, now held by `holders` (>= 1;
  // 0 throws std::invalid_argument at once). Rethrows a worker's error; throws std::runtime_error when the ring is stopped without one.
  std::size_t take(std::uint64_t step, std::uint32_t holders);
  // One holder fewer; the last frees the slot for the workers.
  void release(std::size_t slot);

  // Ends every claim() and take() waiting now or later.
  void stop();

 private:
  enum class State { free, filling, ready, held };
  struct Slot {
    State state = State::free;
    std::uint64_t step = 0;  // the step it is filling / holds
    std::uint64_t chunks = 0;
    std::uint64_t chunks_done = 0;
    std::uint32_t holders = 0;
  };

  bool claimable() const REQUIRES(mu_);

  const std::size_t slots_count_;
  const std::uint64_t chunk_items_;
  const std::function<std::uint64_t(std::uint64_t)> items_of_;
  Mutex mu_;
  std::condition_variable work_cv_;   // workers: a slot became free, or stop
  std::condition_variable ready_cv_;  // consumer: a slot became ready, or stop
  std::vector<Slot> slots_ GUARDED_BY(mu_);
  bool stopped_ GUARDED_BY(mu_) = false;
  std::exception_ptr error_ GUARDED_BY(mu_);
  std::uint64_t fill_step_ GUARDED_BY(mu_) = 0;  // the step whose chunks workers claim next
  std::uint64_t fill_chunk_ GUARDED_BY(mu_) = 0;
};

}  // namespace tandem::feed
