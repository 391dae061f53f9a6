#include "learner/rl/slot_gather.hpp"

namespace tandem::rl {

SlotGatherer::SlotGatherer(shm::ExperienceRings& rings, RingRange range, std::uint32_t slots_per_update,
                           std::uint32_t deterministic_per_actor)
    : rings_(rings),
      first_(range.first),
      actors_(range.count),
      per_update_(slots_per_update),
      per_actor_(deterministic_per_actor),
      held_(range.count, 0) {
  good_.reserve(slots_per_update);
}

bool SlotGatherer::take(std::uint32_t i) {
  const std::uint32_t a = first_ + i;
  for (;;) {
    const std::optional<shm::SlotView> slot = rings_.peek(a, held_[i]);
    if (!slot) return false;
    if (rings_.verify(a, *slot)) {
      ++held_[i];
      good_.push_back({a, *slot});
      return true;
    }
    ++refused_;
    if (held_[i] == 0) rings_.release(a);  // at the front: gone at once, the actor may reuse it
    else ++held_[i];                       // behind held slots: released with them, oldest first
  }
}

bool SlotGatherer::gather(const std::function<bool()>& keep_waiting) {
  while (good_.size() < per_update_) {
    bool progress = false;
    if (per_actor_ > 0) {
      // Fixed order: position p of the update's batch comes from actor p % R.
      progress = take(static_cast<std::uint32_t>(good_.size() % actors_));
    } else {
      for (std::uint32_t i = 0; i < actors_ && good_.size() < per_update_; ++i) {
        progress = take((cursor_ + i) % actors_) || progress;
      }
      cursor_ = (cursor_ + 1) % actors_;
    }
    if (!progress && !keep_waiting()) return false;
  }
  return true;
}

void SlotGatherer::release() {
  for (std::uint32_t i = 0; i < actors_; ++i) {
    for (; held_[i] > 0; --held_[i]) rings_.release(first_ + i);
  }
  good_.clear();
}

}  // namespace tandem::rl
