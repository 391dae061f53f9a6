#include "learner/feed/slot_ring.hpp"

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>

#include "common/log.hpp"

namespace tandem::feed {

SlotRing::SlotRing(std::size_t slots, std::uint64_t chunk_items, std::function<std::uint64_t(std::uint64_t)> items_of)
    : slots_count_(slots), chunk_items_(chunk_items), items_of_(std::move(items_of)), slots_(slots) {}

// A step's chunks are claimed in order: the next one is claimable while its step is part-claimed,
// or when the step's slot is free again.
bool SlotRing::claimable() const { return fill_chunk_ > 0 || slots_[fill_step_ % slots_count_].state == State::free; }

std::optional<SlotRing::Chunk> SlotRing::claim() {
  MutexLock lock(mu_);
  lock.wait(work_cv_, [&]() REQUIRES(mu_) { return stopped_ || claimable(); });
  if (stopped_) return std::nullopt;
  Chunk chunk;
  chunk.step = fill_step_;
  chunk.slot = fill_step_ % slots_count_;
  chunk.step_items = items_of_(fill_step_);
  Slot& slot = slots_[chunk.slot];
  if (fill_chunk_ == 0) {
    slot.state = State::filling;
    slot.step = fill_step_;
    slot.chunks = (chunk.step_items + chunk_items_ - 1) / chunk_items_;
    slot.chunks_done = 0;
  }
  chunk.begin = fill_chunk_ * chunk_items_;
  chunk.end = std::min(chunk.step_items, chunk.begin + chunk_items_);
  if (++fill_chunk_ == slot.chunks) {
    ++fill_step_;
    fill_chunk_ = 0;
  }
  return chunk;
}

bool SlotRing::finish(const Chunk& chunk) {
  MutexLock lock(mu_);
  Slot& slot = slots_[chunk.slot];
  return ++slot.chunks_done == slot.chunks;
}

void SlotRing::mark_ready(std::size_t slot) {
  {
    MutexLock lock(mu_);
    slots_[slot].state = State::ready;
  }
  ready_cv_.notify_all();
}

void SlotRing::fail(std::exception_ptr error) {
  {
    MutexLock lock(mu_);
    if (!error_) error_ = std::move(error);
    stopped_ = true;
  }
  ready_cv_.notify_all();
  work_cv_.notify_all();
}

std::size_t SlotRing::take(std::uint64_t step, std::uint32_t holders) {
  // No release would ever free a slot that nobody holds: the workers would stall on it a lap later.
  if (holders == 0)
    throw std::invalid_argument(
        fmt::format("SlotRing::take(step {}, holders 0): holders must be >= 1, one per release to come", step));
  const std::size_t k = step % slots_count_;
  MutexLock lock(mu_);
  Slot& slot = slots_[k];
  auto staged = [&]() REQUIRES(mu_) { return stopped_ || (slot.state == State::ready && slot.step == step); };
  bool warned = false;
  while (!lock.wait_for(ready_cv_, std::chrono::seconds(10), staged))
    if (!warned && slot.state == State::held) {
      log::warn(
          "HostFeed: step {} waits for slot {}, still held by the tensors of step {}: release batches "
          "sooner or raise ring_slots ({})",
          step, k, slot.step, slots_count_);
      warned = true;
    }
  if (error_) std::rethrow_exception(error_);
  if (stopped_) throw std::runtime_error("the staging ring was stopped while its consumer waited for a step");
  slot.state = State::held;
  slot.holders = holders;
  return k;
}

void SlotRing::release(std::size_t slot) {
  {
    MutexLock lock(mu_);
    if (--slots_[slot].holders > 0) return;
    slots_[slot].state = State::free;
  }
  work_cv_.notify_all();
}

void SlotRing::stop() {
  {
    MutexLock lock(mu_);
    stopped_ = true;
  }
  work_cv_.notify_all();
  ready_cv_.notify_all();
}

}  // namespace tandem::feed
