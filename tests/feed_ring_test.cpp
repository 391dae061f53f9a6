// SlotRing and RingWorkers (learner/feed/slot_ring.hpp, ring_workers.hpp): HostFeed's staging ring
// without LibTorch, so it also runs under the sanitizers. Workers write a pure function of (step,
// item) into the slots, so every step the consumer takes can be checked item by item.
#include <doctest/doctest.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "learner/feed/ring_workers.hpp"
#include "learner/feed/slot_ring.hpp"

using tandem::feed::RingWorkers;
using tandem::feed::SlotRing;

namespace {

constexpr std::uint64_t kMaxItems = 150;
std::uint64_t items_of(std::uint64_t step) { return 1 + step * 37 % kMaxItems; }  // one to ten chunks of 16
std::uint64_t item_value(std::uint64_t step, std::uint64_t item) { return step * 1'000'003 + item * 7 + 1; }

// The memory behind the ring's slots, and the test's own count of who holds each slot: raised after
// take, lowered just before each release. A fill that finds it above zero is a slot refilled while
// something still held it.
struct Slots {
  explicit Slots(std::size_t n) : items(n, std::vector<std::uint64_t>(kMaxItems)), holders(n) {}
  std::vector<std::vector<std::uint64_t>> items;
  std::vector<std::atomic<int>> holders;
  std::atomic<int> refilled_while_held{0};

  bool hold(std::size_t slot, std::uint64_t step, int count) {
    holders[slot] += count;
    return holds(slot, step);
  }
  bool holds(std::size_t slot, std::uint64_t step) const {
    for (std::uint64_t j = 0; j < items_of(step); ++j)
      if (items[slot][j] != item_value(step, j)) return false;
    return true;
  }
  void release(SlotRing& ring, std::size_t slot) {
    --holders[slot];
    ring.release(slot);
  }
};

RingWorkers::Jobs write_values(Slots& slots) {
  return {.prepare = {},
          .fill =
              [&slots](const SlotRing::Chunk& c) {
    if (slots.holders[c.slot] > 0) ++slots.refilled_while_held;
    for (auto j = c.begin; j < c.end; ++j) slots.items[c.slot][j] = item_value(c.step, j);
          },
          .seal = [](const SlotRing::Chunk&) {}};
}

// Releases slots on its own thread, in the order they are handed to it.
class Releaser {
 public:
  Releaser(SlotRing& ring, Slots& slots)
      : thread_([this, &ring, &slots] {
          std::unique_lock lock(mu_);
          for (;;) {
            cv_.wait(lock, [&] { return done_ || !queue_.empty(); });
            if (queue_.empty()) return;
            const std::size_t slot = queue_.front();
            queue_.pop_front();
            lock.unlock();
            slots.release(ring, slot);
            lock.lock();
          }
        }) {}
  ~Releaser() {
    {
      std::lock_guard lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void release(std::size_t slot) {
    {
      std::lock_guard lock(mu_);
      queue_.push_back(slot);
    }
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::size_t> queue_;
  bool done_ = false;
  std::thread thread_;
};

}  // namespace

TEST_CASE("staging ring: the consumer takes every step in order, each filled whole by several workers" *
          doctest::timeout(60)) {
  auto ring = std::make_shared<SlotRing>(4, 16, items_of);
  Slots slots(4);
  RingWorkers workers(*ring, 4, write_values(slots));
  int wrong_slot = 0, wrong_items = 0;
  for (std::uint64_t step = 0; step < 500; ++step) {
    const std::size_t k = ring->take(step, 1);
    wrong_slot += k != step % 4;
    wrong_items += !slots.hold(k, step, 1);
    slots.release(*ring, k);
  }
  CHECK(wrong_slot == 0);
  CHECK(wrong_items == 0);
  CHECK(slots.refilled_while_held.load() == 0);
}

TEST_CASE("staging ring: a slot is refilled only after its last holder released it, on any thread" *
          doctest::timeout(60)) {
  constexpr std::size_t kSlots = 4;
  auto ring = std::make_shared<SlotRing>(kSlots, 16, items_of);
  Slots slots(kSlots);
  RingWorkers workers(*ring, 3, write_values(slots));
  Releaser releaser(*ring, slots);
  std::deque<std::pair<std::uint64_t, std::size_t>> held;  // (step, slot), oldest first
  int wrong_items = 0, overwritten = 0;
  for (std::uint64_t step = 0; step < 400; ++step) {
    const std::size_t k = ring->take(step, 2);
    REQUIRE(slots.refilled_while_held.load() == 0);  // stop at the first one: a broken ring may hang next
    wrong_items += !slots.hold(k, step, 2);
    held.emplace_back(step, k);
    if (held.size() < kSlots - 1) continue;
    // The workers want this slot back for step + 1 or later: one release must not be enough.
    const auto [old_step, old_k] = held.front();
    held.pop_front();
    slots.release(*ring, old_k);
    overwritten += !slots.holds(old_k, old_step);
    releaser.release(old_k);
  }
  for (const auto& [step, k] : held) {
    overwritten += !slots.holds(k, step);
    slots.release(*ring, k);
    slots.release(*ring, k);
  }
  CHECK(wrong_items == 0);
  CHECK(overwritten == 0);
  CHECK(slots.refilled_while_held.load() == 0);
}

TEST_CASE("staging ring: a worker's error reaches the consumer that waits for its step" * doctest::timeout(60)) {
  auto ring = std::make_shared<SlotRing>(3, 8, items_of);
  Slots slots(3);
  auto jobs = write_values(slots);
  jobs.fill = [fill = jobs.fill](const SlotRing::Chunk& c) {
    if (c.step == 5) throw std::runtime_error("gather failed at step 5");
    fill(c);
  };
  RingWorkers workers(*ring, 2, jobs);
  std::string error;
  std::uint64_t step = 0;
  for (; step <= 5 && error.empty(); ++step) {
    try {
      const std::size_t k = ring->take(step, 1);  // earlier steps may see the error too
      slots.hold(k, step, 1);
      slots.release(*ring, k);
    } catch (const std::runtime_error& e) {
      error = e.what();
    }
  }
  CHECK(error == "gather failed at step 5");
}

TEST_CASE("staging ring: destroying the workers while every slot is held ends them, leaving the slots intact" *
          doctest::timeout(60)) {
  auto ring = std::make_shared<SlotRing>(3, 16, items_of);
  Slots slots(3);
  int wrong_items = 0;
  {
    RingWorkers workers(*ring, 4, write_values(slots));
    for (std::uint64_t step = 0; step < 3; ++step) wrong_items += !slots.hold(ring->take(step, 1), step, 1);
  }  // the workers wait for step 3's slot, which is held: the destructor must still end them
  for (std::uint64_t step = 0; step < 3; ++step) wrong_items += !slots.holds(step, step);
  CHECK(wrong_items == 0);
  CHECK(slots.refilled_while_held.load() == 0);
}

TEST_CASE("staging ring: stopping wakes a consumer that waits for a step no worker will fill" * doctest::timeout(60)) {
  SlotRing ring(2, 8, items_of);
  bool threw = false;
  std::thread consumer([&] {
    try {
      ring.take(0, 1);
    } catch (const std::runtime_error&) {
      threw = true;
    }
  });
  ring.stop();
  consumer.join();
  CHECK(threw);
}

TEST_CASE("staging ring: a take with no holders is refused, naming the argument, and holds nothing" *
          doctest::timeout(60)) {
  SlotRing ring(1, 8, items_of);
  Slots slots(1);
  RingWorkers workers(ring, 2, write_values(slots));
  REQUIRE_THROWS_WITH_AS(ring.take(0, 0), doctest::Contains("holders must be >= 1"), std::invalid_argument);
  // Step 0 is still there to take, and the ring's one slot comes back for step 1 after its release.
  CHECK(slots.hold(ring.take(0, 1), 0, 1));
  slots.release(ring, 0);
  CHECK(slots.hold(ring.take(1, 1), 1, 1));
  slots.release(ring, 0);
}
