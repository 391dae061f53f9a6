// Experience rings across processes: an actor child SIGKILLed at random points while it writes,
// restarted each time, while the learner (this process) consumes. Nothing half-written is ever
// consumed and every restart continues at head.
//
// 1000 kills, the ring's robustness target (about 7 s on an idle 2-core machine, 27 s on a busy
// one); TANDEM_RING_KILLS=N runs another number.
#include <doctest/doctest.h>

#include <sched.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <algorithm>
#include <random>
#include <string>
#include <thread>

#include "shm/experience_ring.hpp"
#include "tests/experience_ring_fill.hpp"
#include "tests/harness.hpp"

using namespace tandem;
using namespace std::chrono_literals;

namespace {

shm::ExperienceShape kill_shape() {
  // ~70 KiB slots: filling one takes long enough that most kills land mid-write.
  shm::ExperienceShape s;
  s.num_actors = 2;
  s.slots_per_ring = 4;
  s.steps = 32;
  s.envs = 8;
  s.obs_dim = 48;
  s.logits_dim = 6;
  return s;
}

}  // namespace

// Writes slots to its ring forever, each filled from its own ring index, until it is killed. Before a
// fill it scribbles over the slot, so a kill mid-write leaves visibly wrong bytes behind.
TANDEM_CHILD("ring-writer") {
  const auto& args = test::child_args();
  const auto actor = static_cast<std::uint32_t>(std::stoul(args.at(1)));
  shm::ExperienceWriter w = shm::ExperienceWriter::attach(args.at(0), actor);
  for (;;) {
    auto slot = w.begin_write();
    if (!slot) {
      sched_yield();
      continue;
    }
    std::fill_n(slot->bytes(), w.descriptor().slot_bytes, std::byte{0xa5});
    test::fill_slot(*slot, w.descriptor(), slot->index());
    w.commit(*slot);
  }
}

TEST_CASE(
    "experience rings: an actor SIGKILLed mid-write many times never hands the learner a bad slot, and each "
    "restart continues at head" *
    doctest::timeout(300)) {
  const char* env = std::getenv("TANDEM_RING_KILLS");
  const int kills = env ? std::atoi(env) : 1000;
  const std::string job = test::unique_name("expkill");
  shm::ExperienceRings rings = shm::ExperienceRings::create(job, kill_shape());
  const auto& d = rings.descriptor();

  std::atomic<bool> done{false};
  std::atomic<std::uint64_t> consumed{0}, bad{0};
  std::thread learner([&] {
    std::uint64_t expect = 0;
    while (!done.load() || rings.peek(1)) {
      auto slot = rings.peek(1);
      if (!slot) {
        sched_yield();
        continue;
      }
      // Consumed in sequence, verified, and holding exactly what the writer meant for that index.
      if (slot->index() != expect || !rings.verify(1, *slot) || !test::slot_holds(*slot, d, expect)) bad.fetch_add(1);
      rings.release(1);
      ++expect;
      consumed.store(expect);
    }
  });

  std::mt19937 rng(12345);
  std::uniform_int_distribution<int> delay_us(0, 3000);
  // Raw view of ring 1's slots, to tell whether a kill landed mid-write (the slot at head half-done).
  shm::Segment raw = shm::Segment::attach(rings.segment_name(), shm::Kind::experience, shm::kExperienceLayoutVersion,
                                          shm::Segment::Access::read_only, "");
  auto slot_bytes_at = [&](std::uint64_t index) {
    return raw.base() + d.slots_offset + (d.slots_per_ring + index % d.slots_per_ring) * d.slot_stride;
  };
  std::uint64_t last_head = 0;
  int head_went_back = 0, mid_write = 0;
  for (int round = 0; round < kills; ++round) {
    const std::uint32_t attaches = rings.ring(1).writer_attaches.load();
    test::Child actor = test::spawn_child("ring-writer", {job, "1"});
    const auto deadline = std::chrono::steady_clock::now() + 10s;  // started and attached: now it writes
    while (rings.ring(1).writer_attaches.load() == attaches && std::chrono::steady_clock::now() < deadline)
      sched_yield();
    REQUIRE(rings.ring(1).writer_attaches.load() == attaches + 1);
    std::this_thread::sleep_for(std::chrono::microseconds(delay_us(rng)));  // when the kill lands, not a check
    actor.kill(SIGKILL);
    actor.wait();
    const std::uint64_t head = rings.ring(1).head.load();
    if (head < last_head) ++head_went_back;
    const std::byte* next = slot_bytes_at(head);  // not yet committed: ours to read while no writer lives
    const auto* next_header = reinterpret_cast<const shm::TrajectoryHeader*>(next);
    if (head >= d.slots_per_ring && shm::slot_checksum(next, d) != next_header->checksum) ++mid_write;
    last_head = head;
  }
  done.store(true);
  learner.join();

  INFO("kills: " << kills << ", slots committed: " << last_head << ", kills mid-write: " << mid_write);
  MESSAGE("kills: " << kills << ", slots committed: " << last_head << ", kills that landed mid-write: " << mid_write);
  CHECK(mid_write > 0);  // the test did test what it claims
  CHECK(bad.load() == 0);
  CHECK(rings.ring(1).refused.load() == 0);
  CHECK(head_went_back == 0);
  CHECK(consumed.load() == rings.ring(1).head.load());
  CHECK(rings.ring(1).writer_attaches.load() == static_cast<std::uint32_t>(kills));
  CHECK(last_head > static_cast<std::uint64_t>(kills) / 4);  // the writers did make progress
  CHECK(rings.ring(0).head.load() == 0);                     // and touched no other ring
}
