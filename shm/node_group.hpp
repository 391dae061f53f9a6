// NodeGroup: the data-parallel learner ranks of one node summing and broadcasting CPU buffers through
// one shared-memory segment, /tandem.<job>.reduce-<pid of rank 0> (kind 6, docs/FORMAT.md "Node
// reduce group"). An all-reduce here costs a copy in, a 1/N share of the sum and a copy out of
// ordinary memory, and of memory that lives in the segment's slots only the sum, done by whichever
// rank is idle; Gloo between processes of one machine costs TCP loopback: kernel copies and
// thread wake-ups that on two cores cost the ranks' compute (docs/results/HISTORY.md), which is why
// CPU ranks of one node use this and ranks on several nodes keep Gloo (docs/DEPARTURES.md).
//
// Lifecycle: rank 0 create()s the segment and hands its name to the others (the rendezvous store);
// each rank attach()es, then every rank calls join(): once all have arrived, rank 0 unlinks the name,
// so from the first collective on nothing of the group is left in /dev/shm whatever happens to any
// rank. A creation or join that fails unlinks it too (rank 0's Segment owns the name until then).
//
// Payload (at the segment's payload offset):
//   [0, 64)                  ReduceControl: `bell` (the futex every waiter sleeps on), `aborted_by`,
//                            the slots ops' piece counters
//   [64, 64 + 64 * world)    one RankLane per rank: who it is, `arrived` (barriers it has reached),
//                            `slots_started`
//   data_offset:             in[2][world][chunk_bytes], then out[2][chunk_bytes]
//   slots (rounded to 4096): rider[2][chunk_bytes], slot[world][slot_bytes], where the group has slots
// A collective is cut into rounds of at most chunk_bytes per rank; round r uses the buffers of parity
// r & 1. All-reduce round: each rank copies its part (x scale) into in[p][rank]; barrier; each rank
// sums its 1/world share of the part over in[p][0..world) in rank order into out[p]; barrier; each
// rank copies out[p] back. Two ranks stop after the first barrier: each sums in[p][0] + in[p][1] into
// its own buffer (the same operation on the same bits on both, so no out[p], second barrier or copy
// back). Broadcast round: the root copies into in[p][root]; barrier; the others copy it out. A
// rider is a broadcast that rides with an all-reduce (a step's BatchNorm buffers with its gradients,
// say): its bytes go behind the root's part in the all-reduce's last round (at the
// part's end rounded up to 64 bytes), copied out by the others after that round's first barrier:
// one round, one sync point, for a step's gradients and BatchNorm buffers together.
// Slots op (start_slots/finish_slots): the gradients already live in the slots, so nothing is copied
// in or out. Starting one publishes `slots_started` (the root first copies its riding bytes into
// rider[parity]); its range is cut into pieces of kSlotPiece floats, numbered on from every earlier
// op's. A rank in finish_slots takes the next piece (a CAS on `pieces_claimed`) while every rank has
// started the op, sums it over slot[0..world) in rank order (x scale) and writes it into every slot,
// then counts it in `pieces_summed`; the op is done when all its pieces are. So the rank that
// finished backward first sums what the other has already handed over (the first buckets) while that
// one is still in backward. A rank writes its own slot's range of an op only before starting it
// (backward) and after finishing it (the optimizer, zeroing): other ranks touch it only in between.
// Riders alternate between two buffers: the root rewrites one only two riding ops later, after every
// rank started the op between, which each did after copying the first out.
//
// Barrier k: a rank stores `arrived` = k (seq_cst), increments `bell` and wakes the bell's sleepers
// (FUTEX_WAKE on the shared mapping: C++20 atomic wait uses process-private futexes), then waits
// until every lane's `arrived` >= k: a spin of up to 200 us (a rank that is about to arrive costs no
// futex round trip, whose wake-up alone takes tens of us), then FUTEX_WAIT on `bell` in slices of at most
// 100 ms, checking between slices whether a rank it waits for has exited (its pid and start time in
// /proc, so a reused pid is not mistaken for it) or whether a rank aborted.
//
// Every wait (a slots op's too) works this way.
//
// Threads: one thread per rank calls join() and the collectives, in the same order on every rank;
// abort() may be called from any thread, and makes this rank's and every other rank's waits fail at once.
// Failure is a [[nodiscard]] Outcome naming the rank that exited, timed out or aborted; after one,
// the group is broken and every later collective fails.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

#include "shm/segment.hpp"

namespace tandem::shm {

inline constexpr std::uint32_t kReduceLayoutVersion = 1;
inline constexpr std::size_t kReduceChunkBytes = 1u << 20;  // per rank and round
inline constexpr int kReduceMaxWorld = 60;                  // lanes fill the descriptor's page at most
inline constexpr std::size_t kSlotPiece = 8192;             // floats a slots op hands out at a time

struct ReduceDescriptor {  // at byte 64
  std::uint32_t world;     // ranks in the group
  std::uint32_t reserved;
  std::uint64_t chunk_bytes;  // per rank and round, a multiple of 64
  std::uint64_t data_offset;  // payload offset of in[0][0]
  std::uint64_t slot_bytes;   // per rank, a multiple of 64; 0: no slots
};
static_assert(std::is_standard_layout_v<ReduceDescriptor> && sizeof(ReduceDescriptor) == 32);

struct ReduceControl {                        // payload byte 0
  std::atomic<std::uint32_t> bell;            // +1 on every arrival, slots op start, finished slots op
                                              // and abort: the futex word
  std::atomic<std::uint32_t> aborted_by;      // 0, or the first rank that aborted + 1
  std::atomic<std::uint64_t> pieces_claimed;  // slots-op pieces any rank has taken on, ever
  std::atomic<std::uint64_t> pieces_summed;   // ... and summed
  std::uint64_t reserved[5];
};
static_assert(std::is_standard_layout_v<ReduceControl> && sizeof(ReduceControl) == 64);

struct RankLane {                      // payload byte 64 + 64 * rank
  std::atomic<std::uint64_t> arrived;  // barriers this rank has reached (join is barrier 1)
  std::atomic<std::uint32_t> pid;      // 0 until the rank attached
  std::uint32_t reserved0;
  std::atomic<std::uint64_t> start_ticks;    // /proc/<pid>/stat field 22: tells a reused pid apart
  std::atomic<std::uint64_t> slots_started;  // slots ops this rank has started
  std::uint64_t reserved[4];
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
    enum class Status { ok, rank_exited, timed_out, aborted };
    Status status = Status::ok;
    int rank = -1;  // the rank that exited, was not there in time, or aborted (-1: not known)
    explicit operator bool() const { return status == Status::ok; }
    std::string describe() const;  // "rank 1 exited", ...
  };

  // Rank 0. `job` names the segment; UserError when /dev/shm lacks room (naming the size and the fix).
  // `slot_floats` > 0: each rank also gets a slot of that many floats in the segment (slot()), which
  // the slots ops sum in place; the name then ends in "-slots".
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
  // The in-place all-reduce of slot floats [offset, offset + count) (x `scale`), in two halves, so a
  // rank hands its part over the moment it is final and whichever rank is idle sums it (work
  // sharing; node_group_slots.cpp):
  //   SlotsOp op = group.start_slots(offset, count, scale, then);  // never waits
  //   ... more work, more ops started ...
  //   group.finish_slots(op, timeout);  // sums pieces every rank has handed over, until all are summed
  // Afterwards every rank's slot holds the sum there (summed in rank order, the same bits in every
  // slot), and rank `then.root`'s `then.bytes` are in every rank's `then.data`. Ops start in the same
  // order, with the same arguments, on every rank, and finish in the order started. A range outside
  // the slots is a UserError.
  struct SlotsOp {
    std::uint64_t index = 0;        // slots ops started before it (the same on every rank)
    std::uint64_t first_piece = 0;  // its pieces are [first_piece, first_piece + pieces) of the group's
    std::uint64_t pieces = 0;
    std::size_t offset = 0, count = 0;
    float scale = 1.0f;
    RidingBroadcast then;
    bool rides = false;  // `then` goes through rider[parity] (it fits in a chunk)
    std::uint64_t parity = 0;
  };
  SlotsOp start_slots(std::size_t offset, std::size_t count, float scale, RidingBroadcast then = {});
  [[nodiscard]] Outcome finish_slots(const SlotsOp& op, std::chrono::milliseconds timeout);
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
  // Waits until `holdup()` returns nullopt, else the rank that holds things up (-1: not known),
  // failing when it (or, unknown, any other rank) exited, a rank aborted, or the deadline passed.
  [[nodiscard]] Outcome wait_while(const std::function<std::optional<int>()>& holdup, Clock::time_point deadline);
  void ring();  // wakes every rank sleeping on the bell
  void sum_piece(const SlotsOp& op, std::uint64_t piece);
  int first_rank_behind(std::uint64_t barrier) const;
  bool lane_exited(int rank) const;
  ReduceControl& control() const;
  RankLane& lane(int rank) const;
  std::byte* in(std::uint64_t round, int rank) const;
  std::byte* out(std::uint64_t round) const;
  std::byte* rider(std::uint64_t parity) const;

  std::shared_ptr<Segment> segment_;  // shared with memory handed out from the slots
  int rank_ = 0, world_ = 0;
  std::size_t chunk_ = 0, slot_bytes_ = 0;
  std::uint64_t barriers_ = 0;                             // barriers this rank has reached
  std::uint64_t rounds_ = 0;                               // rounds done: the next round's parity
  std::uint64_t slots_ops_ = 0, pieces_ = 0, riders_ = 0;  // slots ops, their pieces and riders started
  Outcome broken_;                                         // the first failure; every later call returns it
};

}  // namespace tandem::shm
