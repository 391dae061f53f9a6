// NodeGroup: the data-parallel learner ranks of one node summing and broadcasting CPU buffers through
// one shared-memory segment, /tandem.<job>.reduce-<pid of rank 0> (kind 6, docs/FORMAT.md "Node
// reduce group"). An all-reduce here costs a copy in, a 1/N share of the sum and a copy out of
// ordinary memory; Gloo between processes of one machine costs TCP loopback: kernel copies and
// thread wake-ups, ~7 ms of CPU per 0.83 MB step on two cores (docs/BENCHMARKS.md), which is why
// CPU ranks of one node use this and ranks on several nodes keep Gloo (docs/DEPARTURES.md).
//
// Lifecycle: rank 0 create()s the segment and hands its name to the others (the rendezvous store);
// each rank attach()es, then every rank calls join(): once all have arrived, rank 0 unlinks the name,
// so from the first collective on nothing of the group is left in /dev/shm whatever happens to any
// rank. A creation or join that fails unlinks it too (rank 0's Segment owns the name until then).
//
// Payload (at the segment's payload offset):
//   [0, 64)                  ReduceControl: `bell` (the futex every waiter sleeps on), `aborted_by`
//   [64, 64 + 64 * world)    one RankLane per rank: who it is, `arrived` (barriers it has reached)
//   data_offset:             in[2][world][chunk_bytes], then out[2][chunk_bytes]
//   slots (rounded to 4096): slot[world][slot_bytes], where the group was made with slots
// A collective is cut into rounds of at most chunk_bytes per rank; round r uses the buffers of parity
// r & 1. All-reduce round: each rank copies its part (x scale) into in[p][rank]; barrier; each rank
// sums its 1/world share of the part over in[p][0..world) in rank order into out[p]; barrier; each
// rank copies out[p] back. Two ranks stop after the first barrier: each sums in[p][0] + in[p][1] into
// its own buffer (the same operation on the same bits on both, so no out[p], second barrier or copy
// back). Broadcast round: the root copies into in[p][root]; barrier; the others copy it out. A
// broadcast that rides with an all-reduce goes behind the root's part in its last round (at the
// part's end rounded up to 64 bytes), copied out by the others after that round's first barrier:
// one round, one sync point, for a step's gradients and BatchNorm buffers together.
// Slots round (all_reduce_slots): the gradients already live in the slots, so there is nothing to copy
// in: barrier; each rank sums its 1/world share over slot[0..world) in rank order (x scale) and writes
// it into every slot; barrier. A rank touches its own slot outside a slots round only (backward, the
// optimizer), and a peer's only inside one, between the two barriers, when that rank is in it too.
// Every element of a sum is computed once, by one rank, and copied by all (or, with two ranks, by
// both the same way): the ranks' results are bitwise equal. Two parities suffice: a rank writes round r + 2's buffers only after passing a
// barrier of round r + 1, which no rank reaches before it has finished reading round r.
//
// Barrier k: a rank stores `arrived` = k (seq_cst), increments `bell` and wakes the bell's sleepers
// (FUTEX_WAKE on the shared mapping: C++20 atomic wait uses process-private futexes), then waits
// until every lane's `arrived` >= k: a short spin, then FUTEX_WAIT on `bell` in slices of at most
// 100 ms, checking between slices whether a rank it waits for has exited (its pid and start time in
// /proc, so a reused pid is not mistaken for it) or whether a rank aborted.
//
// Threads: one thread per rank calls join() and the collectives, in the same order on every rank;
// abort() may be called from any thread, and makes this rank's and every peer's waits fail at once.
// Failure is a [[nodiscard]] Outcome naming the rank that exited, timed out or aborted; after one,
// the group is broken and every later collective fails.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>

#include "shm/segment.hpp"

namespace tandem::shm {

inline constexpr std::uint32_t kReduceLayoutVersion = 1;
inline constexpr std::size_t kReduceChunkBytes = 1u << 20;  // per rank and round
inline constexpr int kReduceMaxWorld = 60;                  // lanes fill the descriptor's page at most

struct ReduceDescriptor {      // at byte 64
  std::uint32_t world;         // ranks in the group
  std::uint32_t reserved;
  std::uint64_t chunk_bytes;   // per rank and round, a multiple of 64
  std::uint64_t data_offset;   // payload offset of in[0][0]
  std::uint64_t slot_bytes;    // per rank, a multiple of 64; 0: no slots
};
static_assert(std::is_standard_layout_v<ReduceDescriptor> && sizeof(ReduceDescriptor) == 32);

struct ReduceControl {                     // payload byte 0
  std::atomic<std::uint32_t> bell;         // +1 on every arrival and abort: the futex word
  std::atomic<std::uint32_t> aborted_by;   // 0, or the first rank that aborted + 1
  std::uint64_t reserved[7];
};
static_assert(std::is_standard_layout_v<ReduceControl> && sizeof(ReduceControl) == 64);

struct RankLane {                          // payload byte 64 + 64 * rank
  std::atomic<std::uint64_t> arrived;      // barriers this rank has reached (join is barrier 1)
  std::atomic<std::uint32_t> pid;          // 0 until the rank attached
  std::uint32_t reserved0;
  std::atomic<std::uint64_t> start_ticks;  // /proc/<pid>/stat field 22: tells a reused pid apart
  std::uint64_t reserved[5];
};
static_assert(std::is_standard_layout_v<RankLane> && sizeof(RankLane) == 64);
static_assert(std::atomic<std::uint64_t>::is_always_lock_free && std::atomic<std::uint32_t>::is_always_lock_free);

// A broadcast that rides along with an all-reduce (NodeGroup::all_reduce_sum's `then`): `root`'s
// `bytes` at `data` into every rank's `data`.
struct RidingBroadcast {
  void* data = nullptr;
  std::size_t bytes = 0;
  int root = 0;
};

class NodeGroup {
 public:
  struct Outcome {
    enum class Status { ok, peer_exited, timed_out, aborted };
    Status status = Status::ok;
    int peer = -1;  // the rank that exited, was not there in time, or aborted (-1: not known)
    explicit operator bool() const { return status == Status::ok; }
    std::string describe() const;  // "rank 1 exited", ...
  };

  // Rank 0. `job` names the segment; UserError when /dev/shm lacks room (naming the size and the fix).
  // `slot_floats` > 0: each rank also gets a slot of that many floats in the segment (slot()), which
  // all_reduce_slots sums in place; the name then ends in "-slots".
  static NodeGroup create(std::string_view job, int world, std::size_t chunk_bytes = kReduceChunkBytes,
                          std::size_t slot_floats = 0);
  // Ranks 1..world-1, with the name rank 0 handed out. UserError if it is not a group of `world`
  // ranks, or `rank` already attached.
  static NodeGroup attach(const std::string& name, int rank, int world);

  NodeGroup() = default;
  NodeGroup(NodeGroup&&) noexcept = default;
  NodeGroup& operator=(NodeGroup&&) noexcept = default;

  [[nodiscard]] Outcome join(std::chrono::milliseconds timeout);
  // Sums every rank's `count` floats, each x `scale` as the rank copies them in, into every rank's
  // `data`; then `then.root`'s `then.bytes` into every rank's `then.data`: behind the root's part of
  // the sum's last round where they fit (no barrier of their own), else in rounds of their own.
  [[nodiscard]] Outcome all_reduce_sum(float* data, std::size_t count, float scale, std::chrono::milliseconds timeout,
                                       RidingBroadcast then = {});
  // Sums every rank's slot floats [offset, offset + count), each x `scale`, in place: afterwards each
  // slot holds the sum there. Rank r sums the r-th 1/world share over the slots in rank order and
  // writes it into every slot, between two barriers: no copy in or out. Then `then`, as above. A range
  // outside the slots is a UserError.
  [[nodiscard]] Outcome all_reduce_slots(std::size_t offset, std::size_t count, float scale,
                                         std::chrono::milliseconds timeout, RidingBroadcast then = {});
  // `root`'s `bytes` into every rank's `data` (a `root` that is not a rank is a UserError).
  [[nodiscard]] Outcome broadcast(void* data, std::size_t bytes, int root, std::chrono::milliseconds timeout);
  void abort();

  // Rank `rank`'s slot (nullptr without slots), and what keeps the mapping alive: memory handed out
  // from a slot (a tensor over it) holds this, so it stays mapped after the group is gone.
  float* slot(int rank) const;
  std::size_t slot_floats() const { return slot_bytes_ / sizeof(float); }
  std::shared_ptr<const void> mapping() const { return segment_; }

  const std::string& name() const { return segment_->name(); }
  int rank() const { return rank_; }
  int world() const { return world_; }

 private:
  using Clock = std::chrono::steady_clock;
  NodeGroup(Segment segment, int rank);
  [[nodiscard]] Outcome broadcast_until(void* data, std::size_t bytes, int root, Clock::time_point deadline);
  [[nodiscard]] Outcome barrier(Clock::time_point deadline);
  void check_root(int root) const;
  [[nodiscard]] Outcome wait_for_all(std::uint64_t barrier, Clock::time_point deadline);
  int first_rank_behind(std::uint64_t barrier) const;
  bool lane_exited(int rank) const;
  ReduceControl& control() const;
  RankLane& lane(int rank) const;
  std::byte* in(std::uint64_t round, int rank) const;
  std::byte* out(std::uint64_t round) const;

  std::shared_ptr<Segment> segment_;  // shared with memory handed out from the slots
  int rank_ = 0, world_ = 0;
  std::size_t chunk_ = 0, slot_bytes_ = 0;
  std::uint64_t barriers_ = 0;  // barriers this rank has reached
  std::uint64_t rounds_ = 0;    // rounds done: the next round's parity
  Outcome broken_;              // the first failure; every later call returns it
};

}  // namespace tandem::shm
