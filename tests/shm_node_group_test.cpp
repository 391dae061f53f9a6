// Node reduce group (shm/node_group.hpp) across processes: this test process is rank 0, its children
// (this binary re-run) the other ranks.
#include <doctest/doctest.h>
#include <fmt/format.h>
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "common/clock.hpp"
#include "shm/node_group.hpp"
#include "tests/harness.hpp"

using namespace tandem;
using shm::NodeGroup;
using Status = NodeGroup::Outcome::Status;
using namespace std::chrono_literals;

namespace {

constexpr std::size_t kSmallChunk = 4096;  // 1024 floats per round: most sizes below take several rounds
const std::vector<std::size_t> kCounts = {1, 2, 5, 1023, 1024, 3001, 100000};

float value_of(int rank, std::size_t i) { return static_cast<float>((i * 2654435761u + rank * 97) % 1000) / 7.0f; }

// What the group must produce: the ranks' values x scale summed in rank order, as the group sums them.
std::vector<float> expected_sum(int world, std::size_t n, float scale) {
  std::vector<float> sum(n);
  for (std::size_t i = 0; i < n; ++i) {
    sum[i] = value_of(0, i) * scale + value_of(1, i) * scale;
    for (int r = 2; r < world; ++r) sum[i] += value_of(r, i) * scale;
  }
  return sum;
}

// Every size in kCounts: a plain sum; sums x 0.5 with a broadcast from the last rank riding along,
// small (behind the sum's last round where it fits: sizes 1, 5, 3001) and larger than a round (in
// rounds of its own); a broadcast alone. 0 if every result is exact.
int exchange(NodeGroup& group) {
  const int root = group.world() - 1;
  const auto filled = [&](std::size_t bytes) {
    return std::vector<std::uint8_t>(bytes, static_cast<std::uint8_t>(group.rank()));
  };
  const auto all_root = [&](const std::vector<std::uint8_t>& bytes) {
    return std::all_of(bytes.begin(), bytes.end(), [&](std::uint8_t b) { return b == root; });
  };
  for (std::size_t n : kCounts) {
    const std::vector<std::vector<std::uint8_t>> riders = {{}, filled(n % 97 + 1), filled(kSmallChunk + 5)};
    for (std::vector<std::uint8_t> rider : riders) {
      const float scale = rider.empty() ? 1.0f : 0.5f;
      std::vector<float> data(n);
      for (std::size_t i = 0; i < n; ++i) data[i] = value_of(group.rank(), i);
      if (!group.all_reduce_sum(data.data(), n, scale, 10s, {rider.data(), rider.size(), root})) return 2;
      if (std::memcmp(data.data(), expected_sum(group.world(), n, scale).data(), n * sizeof(float)) != 0) return 3;
      if (!all_root(rider)) return 4;
    }
    std::vector<std::uint8_t> bytes = filled(n * 3 + 1);
    if (!group.broadcast(bytes.data(), bytes.size(), root, 10s)) return 5;
    if (!all_root(bytes)) return 6;
  }
  return 0;
}

// Slots ops on ranges that follow each other (none, one float, a piece less one, a piece, a piece and
// a bit; kSlotTail floats after them stay out), all started before the first is finished: x 0.5 with
// small riding bytes (through rider[]), then x 1 with riders larger than a chunk (in rounds).
constexpr std::size_t kPiece = shm::kSlotPiece;
const std::vector<std::size_t> kSlotCounts = {0, 1, kPiece - 1, kPiece, kPiece + 5};
constexpr std::size_t kSlotTail = 7;
constexpr std::size_t kSlotFloats = 3 * kPiece + 5 + kSlotTail;

void fill_slot(NodeGroup& group) {
  float* mine = group.slot(group.rank());
  for (std::size_t i = 0; i < kSlotFloats; ++i) mine[i] = value_of(group.rank(), i);
}

// 0 if this rank's slot holds the sum x scale over the ranges and its own values after them.
int check_slot(const NodeGroup& group, float scale) {
  const std::vector<float> sum = expected_sum(group.world(), kSlotFloats, scale);
  const float* mine = group.slot(group.rank());
  for (std::size_t i = 0; i < kSlotFloats; ++i) {
    const float want = i < kSlotFloats - kSlotTail ? sum[i] : value_of(group.rank(), i);
    // NOLINTNEXTLINE(bugprone-suspicious-memory-comparison): the claim is bitwise equality
    if (std::memcmp(&mine[i], &want, sizeof want) != 0) return 1;
  }
  return 0;
}

int slot_exchange(NodeGroup& group) {
  const int root = group.world() - 1;
  for (std::size_t rider_extra : {std::size_t{0}, kSmallChunk}) {
    const float scale = rider_extra == 0 ? 0.5f : 1.0f;
    fill_slot(group);
    std::vector<std::vector<std::uint8_t>> riders;
    std::vector<NodeGroup::SlotsOp> ops;
    std::size_t offset = 0;
    for (std::size_t count : kSlotCounts) {
      riders.emplace_back(count % 13 + 1 + rider_extra, static_cast<std::uint8_t>(group.rank()));
      ops.push_back(group.start_slots(offset, count, scale, {riders.back().data(), riders.back().size(), root}));
      offset += count;
    }
    for (const auto& op : ops)
      if (!group.finish_slots(op, 10s)) return 2;
    if (check_slot(group, scale) != 0) return 3;
    for (const auto& rider : riders)
      for (auto b : rider)
        if (b != root) return 4;
  }
  return 0;
}

NodeGroup join_as_child() {
  const auto& a = test::child_args();
  NodeGroup group = NodeGroup::attach(a.at(0), std::stoi(a.at(1)), std::stoi(a.at(2)));
  if (!group.join(10s)) std::exit(9);
  return group;
}

test::Child spawn_rank(const char* behaviour, const NodeGroup& group, int rank) {
  return test::spawn_child(behaviour, {group.name(), std::to_string(rank), std::to_string(group.world())});
}

struct Timed {
  NodeGroup::Outcome outcome;
  double seconds = 0;
};

// Rank 0's first all-reduce in a 2-rank group whose rank 1 runs `behaviour` once joined (and, before
// the all-reduce, `meanwhile` with that child): its outcome and how long it took. ~Child reaps rank 1.
Timed reduce_beside(NodeGroup& group, const char* behaviour, std::chrono::milliseconds timeout,
                    const std::function<void(test::Child&)>& meanwhile = {}) {
  test::Child r1 = spawn_rank(behaviour, group, 1);
  REQUIRE(group.join(10s));
  if (meanwhile) meanwhile(r1);
  std::vector<float> data(10, 1.0f);
  const auto t0 = std::chrono::steady_clock::now();
  const NodeGroup::Outcome outcome = group.all_reduce_sum(data.data(), data.size(), 1.0f, timeout);
  return {outcome, seconds_since(t0)};
}

}  // namespace

TANDEM_CHILD("exchanging-rank") {
  NodeGroup group = join_as_child();
  return exchange(group);
}

TANDEM_CHILD("rank-that-exits-after-join") {
  (void)join_as_child();
  return 0;
}

TANDEM_CHILD("rank-that-aborts-after-join") {
  NodeGroup group = join_as_child();
  group.abort();
  std::this_thread::sleep_for(2s);
  return 0;
}

TANDEM_CHILD("slot-exchanging-rank") {
  NodeGroup group = join_as_child();
  if (int failed = slot_exchange(group)) return failed;
  return exchange(group);
}

TANDEM_CHILD("slot-rank-that-naps-before-finishing") {
  NodeGroup group = join_as_child();
  fill_slot(group);
  const auto op = group.start_slots(0, kSlotFloats - kSlotTail, 1.0f);
  std::this_thread::sleep_for(2s);
  if (!group.finish_slots(op, 10s)) return 2;
  return check_slot(group, 1.0f) == 0 ? 0 : 3;
}

TANDEM_CHILD("rank-that-sleeps-after-join") {
  (void)join_as_child();
  std::this_thread::sleep_for(20s);
  return 0;
}

TEST_CASE("node group: two and three ranks all-reduce and broadcast across many rounds, each rank's result exact" *
          doctest::timeout(60)) {
  for (int world : {2, 3}) {  // two ranks take the one-barrier round, three the reduce-scatter one
    CAPTURE(world);
    NodeGroup group = NodeGroup::create(test::unique_name("reduce"), world, kSmallChunk);
    const std::string name = group.name();
    std::vector<test::Child> peers;
    for (int rank = 1; rank < world; ++rank) peers.push_back(spawn_rank("exchanging-rank", group, rank));
    REQUIRE(group.join(10s));
    CHECK_FALSE(shm::Segment::exists(name));  // every rank mapped it: the name is gone already
    CHECK(exchange(group) == 0);
    for (test::Child& peer : peers) CHECK(peer.wait() == 0);
  }
}

TEST_CASE("node group: two and three ranks sum their slots in place, several ops in flight, each slot exact" *
          doctest::timeout(60)) {
  for (int world : {2, 3}) {
    CAPTURE(world);
    NodeGroup group = NodeGroup::create(test::unique_name("reduce"), world, kSmallChunk, kSlotFloats);
    REQUIRE(group.slot_floats() >= kSlotFloats);
    std::vector<test::Child> peers;
    for (int rank = 1; rank < world; ++rank) peers.push_back(spawn_rank("slot-exchanging-rank", group, rank));
    REQUIRE(group.join(10s));
    CHECK(slot_exchange(group) == 0);
    CHECK(exchange(group) == 0);  // the rounds still work beside the slots
    for (test::Child& peer : peers) CHECK(peer.wait() == 0);
  }
}

TEST_CASE("node group: the rank that is idle sums every piece a late rank handed over, without waiting for it" *
          doctest::timeout(30)) {
  NodeGroup group = NodeGroup::create(test::unique_name("reduce"), 2, kSmallChunk, kSlotFloats);
  test::Child r1 = spawn_rank("slot-rank-that-naps-before-finishing", group, 1);
  REQUIRE(group.join(10s));
  fill_slot(group);
  const auto t0 = std::chrono::steady_clock::now();
  REQUIRE(group.finish_slots(group.start_slots(0, kSlotFloats - kSlotTail, 1.0f), 10s));
  CHECK(std::chrono::steady_clock::now() - t0 < 1500ms);  // rank 1 naps 2 s before its finish
  CHECK(check_slot(group, 1.0f) == 0);
  CHECK(r1.wait() == 0);  // and finds its slot summed
}

TEST_CASE("node group: a rank that exits before handing its slot over fails the other rank's finish within a second" *
          doctest::timeout(30)) {
  NodeGroup group = NodeGroup::create(test::unique_name("reduce"), 2, kSmallChunk, kSlotFloats);
  test::Child r1 = spawn_rank("rank-that-exits-after-join", group, 1);
  REQUIRE(group.join(10s));
  CHECK(r1.wait() == 0);
  const auto t0 = std::chrono::steady_clock::now();
  const NodeGroup::Outcome outcome = group.finish_slots(group.start_slots(0, 10, 1.0f), 20s);
  CHECK(outcome.status == Status::rank_exited);
  CHECK(outcome.rank == 1);
  CHECK(std::chrono::steady_clock::now() - t0 < 1s);
}

TEST_CASE("node group: a slots op outside the slots is refused") {
  NodeGroup group = NodeGroup::create(test::unique_name("reduce"), 2, kSmallChunk, 100);
  CHECK(test::error_of([&] { (void)group.start_slots(100, 20, 1.0f); }).find("a slot holds") != std::string::npos);
}

TEST_CASE("node group: a rank that exits mid-run fails the other ranks' next collective within a second, naming it" *
          doctest::timeout(30)) {
  NodeGroup group = NodeGroup::create(test::unique_name("reduce"), 2, kSmallChunk);
  const Timed t = reduce_beside(group, "rank-that-exits-after-join", 20s, [](test::Child& r1) {
    CHECK(r1.wait() == 0);  // reaped: gone from /proc, the case a launcher leaves
  });
  CHECK(t.outcome.status == Status::rank_exited);
  CHECK(t.outcome.rank == 1);
  CHECK(t.outcome.describe() == "rank 1 exited");
  CHECK(t.seconds < 1.0);
  std::vector<float> data(10, 1.0f);
  CHECK(group.broadcast(data.data(), 4, 0, 20s).status == Status::rank_exited);  // broken for good
}

TEST_CASE("node group: a rank that exited but is not yet reaped counts as exited" * doctest::timeout(30)) {
  NodeGroup group = NodeGroup::create(test::unique_name("reduce"), 2, kSmallChunk);
  const Timed t = reduce_beside(group, "rank-that-exits-after-join", 20s, [](test::Child&) {
    std::this_thread::sleep_for(300ms);  // a zombie now: nobody has waited for it
  });
  CHECK(t.outcome.status == Status::rank_exited);
}

TEST_CASE("node group: a rank that hangs makes the collective time out naming it" * doctest::timeout(30)) {
  NodeGroup group = NodeGroup::create(test::unique_name("reduce"), 2, kSmallChunk);
  const Timed t = reduce_beside(group, "rank-that-sleeps-after-join", 400ms);
  CHECK(t.outcome.status == Status::timed_out);
  CHECK(t.outcome.rank == 1);
  CHECK(t.seconds >= 0.4);
  CHECK(t.seconds < 1.5);
}

TEST_CASE("node group: abort on one rank fails the others at once, naming the rank that aborted" *
          doctest::timeout(30)) {
  NodeGroup group = NodeGroup::create(test::unique_name("reduce"), 2, kSmallChunk);
  const Timed t = reduce_beside(group, "rank-that-aborts-after-join", 20s);
  CHECK(t.outcome.status == Status::aborted);
  CHECK(t.outcome.rank == 1);
  CHECK(t.seconds < 1.0);
}

TEST_CASE("node group: a rank that never attaches fails the join at its deadline and leaves nothing in /dev/shm") {
  NodeGroup group = NodeGroup::create(test::unique_name("reduce"), 2, kSmallChunk);
  const std::string name = group.name();
  REQUIRE(shm::Segment::exists(name));
  const NodeGroup::Outcome o = group.join(300ms);
  CHECK(o.status == Status::timed_out);
  CHECK(o.rank == 1);
  CHECK_FALSE(shm::Segment::exists(name));
}

TEST_CASE(
    "node group: attach refuses another world size, a rank out of range, and a rank that already joined; "
    "a broadcast refuses a root that is not a rank") {
  NodeGroup group = NodeGroup::create(test::unique_name("reduce"), 3, kSmallChunk);
  CHECK(test::error_of([&] {
          NodeGroup::attach(group.name(), 1, 2);
        }).find("is for 3 ranks, but this is rank 1 of 2") != std::string::npos);
  CHECK(test::error_of([&] { NodeGroup::attach(group.name(), 3, 3); }).find("rank 3 of 3") != std::string::npos);
  CHECK(test::error_of([&] { NodeGroup::attach(group.name(), 0, 3); }).find("rank 0 of 3") != std::string::npos);
  NodeGroup one = NodeGroup::attach(group.name(), 1, 3);
  std::uint8_t byte = 0;
  CHECK(test::error_of([&] { (void)one.broadcast(&byte, 1, 3, 10ms); }).find("not one of its 3 ranks") !=
        std::string::npos);
  CHECK(test::error_of([&] { NodeGroup::attach(group.name(), 1, 3); }).find("rank 1 already joined it") !=
        std::string::npos);
}

TEST_CASE("node group: attach refuses a crafted descriptor whose buffers would not fit the segment") {
  NodeGroup group = NodeGroup::create(test::unique_name("reduce"), 2, kSmallChunk);
  for (std::uint64_t chunk : {std::uint64_t{0}, std::uint64_t{100}, std::uint64_t{1} << 62, std::uint64_t{64} << 20}) {
    CAPTURE(chunk);
    shm::Segment raw = shm::Segment::attach(group.name(), shm::Kind::reduce, shm::kReduceLayoutVersion,
                                            shm::Segment::Access::read_write, "");
    raw.descriptor_as<shm::ReduceDescriptor>().chunk_bytes = chunk;  // and a checksum that matches it
    raw.header().header_checksum = shm::header_checksum(raw.base());
    CHECK(test::error_of([&] { NodeGroup::attach(group.name(), 1, 2); }).find("has a corrupt descriptor") !=
          std::string::npos);
  }
}

TEST_CASE("node group: too little /dev/shm is a one-line error naming the space, and nothing is created") {
  ::setenv("TANDEM_SHM_LIMIT", "1M", 1);
  const std::string job = test::unique_name("reduce");
  const std::string error = test::error_of([&] { NodeGroup::create(job, 2); });
  ::unsetenv("TANDEM_SHM_LIMIT");
  CHECK(error.find("/dev/shm") != std::string::npos);
  CHECK_FALSE(shm::Segment::exists(shm::reduce_segment_name(job, ::getpid(), false)));
}
