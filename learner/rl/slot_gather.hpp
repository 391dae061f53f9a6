// SlotGatherer: the RL learner's side of the experience rings (shm/experience_ring.hpp, whose
// contract applies): collects one update's worth of verified slots and holds them, zero-copy, until
// the update has used them.
//
//  * Order. Normally any ring's next slot is taken, visiting the rings round robin one slot per visit,
//    so a fast actor cannot starve a slow one's ring. Deterministic mode takes k slots per actor in a
//    fixed order (actor 0, 1, ..., R-1, k times), so the batch never depends on timing.
//  * A slot whose checksum or seq fails is counted (the ring's `refused`) and never handed out. At the
//    front of its ring it is released at once; behind held slots it waits in the ring (releases go
//    oldest first) and is released with them.
//  * Views from slots() are valid until release(); release() frees every held slot of every ring.
//
// Threads: the learner's main thread only (the one consumer of every ring in its range; with learner
// ranks each rank's gatherer has its own range).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "shm/experience_ring.hpp"

namespace tandem::rl {

struct HeldSlot {
  std::uint32_t actor;  // the ring's (the rollout actor's) index in the job
  shm::SlotView view;
};

// The rings one learner rank consumes: those of rollout actors [first, first + count).
struct RingRange {
  std::uint32_t first = 0;
  std::uint32_t count = 0;
};

class SlotGatherer {
 public:
  // deterministic_per_actor = k > 0: the fixed order; 0: any order.
  SlotGatherer(shm::ExperienceRings& rings, RingRange range, std::uint32_t slots_per_update,
               std::uint32_t deterministic_per_actor);
  SlotGatherer(const SlotGatherer&) = delete;
  SlotGatherer& operator=(const SlotGatherer&) = delete;

  // Polls until slots_per_update good slots are held. keep_waiting() runs between polls that found
  // nothing (heartbeat, stop checks) and ends the wait early by returning false; then the result is
  // false and the slots held so far stay held.
  [[nodiscard]] bool gather(const std::function<bool()>& keep_waiting);
  const std::vector<HeldSlot>& slots() const { return good_; }
  void release();
  std::uint64_t refused() const { return refused_; }  // by this gatherer, since construction

 private:
  // Takes the range's i-th ring's next slot if committed: true when it was good (and is now held).
  bool take(std::uint32_t i);

  shm::ExperienceRings& rings_;
  std::uint32_t first_, actors_, per_update_, per_actor_;
  std::vector<std::uint64_t> held_;  // per ring of the range: slots peeked and not released, good or refused
  std::vector<HeldSlot> good_;
  std::uint32_t cursor_ = 0;
  std::uint64_t refused_ = 0;
};

}  // namespace tandem::rl
