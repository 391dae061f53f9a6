// RingWorkers: the threads that fill a SlotRing. Torch-free.
//
// Each worker claims the ring's chunks in order and calls fill(chunk); the worker that finishes a
// step's last chunk calls seal(chunk) and then marks the slot ready. fill runs concurrently for
// distinct chunks (of one step or of consecutive steps); seal runs once per step. An exception from
// any job stops the ring and is rethrown by its consumer's take().
//
// Threads: construction starts `count` threads, each calling prepare() first (per-thread setup such
// as the current CUDA device); destruction stops the ring and joins them, also while they wait for
// a free slot. The ring must outlive the workers; the jobs may run until the destructor returns.
#pragma once

#include <functional>
#include <thread>
#include <vector>

#include "learner/feed/slot_ring.hpp"

namespace tandem::feed {

class RingWorkers {
 public:
  struct Jobs {
    std::function<void()> prepare;
    std::function<void(const SlotRing::Chunk&)> fill;
    std::function<void(const SlotRing::Chunk&)> seal;
  };

  RingWorkers(SlotRing& ring, unsigned count, Jobs jobs);  // count >= 1
  ~RingWorkers();
  RingWorkers(const RingWorkers&) = delete;
  RingWorkers& operator=(const RingWorkers&) = delete;

 private:
  void work();
  void stop_and_join();

  SlotRing& ring_;
  Jobs jobs_;
  std::vector<std::thread> threads_;
};

}  // namespace tandem::feed
