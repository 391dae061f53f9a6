// TransferWrites: the slab writes one of the Publisher's device transfers holds open (publisher.cpp):
// a slot in the host slab and one in each device slab, each empty where that slab was full.
//
// Contract
//  * Threads: used under the Publisher's mutex only (the slab writers it wraps are not thread-safe).
//  * A transfer that fails after its writes began gives back exactly its own slots, so every slab is
//    writable again at the next publish (a slab allows one open write): run_or_abort() makes that
//    hold for a failure while the copies are enqueued, the committer for one while they run.
//  * CUDA-free, so a CPU test (tests/publisher_cpu_test.cpp) drives it with a failing enqueue.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <vector>

#include "shm/weight_slab.hpp"

namespace tandem::learner {

class TransferWrites {
 public:
  using Slot = shm::WeightSlabWriter::Slot;
  TransferWrites(shm::WeightSlabWriter& host, std::vector<shm::WeightSlabWriter*> devices);

  // Begins a write in every slab that has a free slot. Returns whether any began.
  bool open();
  // Runs `enqueue` (the copies into the open slots); if it throws, every open write is aborted before
  // the error leaves.
  void run_or_abort(const std::function<void()>& enqueue);
  void abort();  // gives back every write still open, unchanged

  std::optional<Slot> host;                  // the host slab's slot; empty: full, or committed
  std::vector<std::optional<Slot>> devices;  // one per device slab, in chain order

 private:
  shm::WeightSlabWriter* host_slab_;
  std::vector<shm::WeightSlabWriter*> device_slabs_;
};

}  // namespace tandem::learner
