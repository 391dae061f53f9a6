// NodeGroup's slots ops (node_group.hpp, "Slots op"): an in-place all-reduce whose summing is done by
// whichever rank is idle, piece by piece, as the ranks hand their parts over.
#include <algorithm>
#include <cstring>

#include "common/error.hpp"
#include "shm/node_group.hpp"

namespace tandem::shm {
namespace {

// Every slot's [0, n) = the sum over ranks of slot_r[i] x scale, in rank order; in place, so each
// element is read from every slot before it is written to any.
void sum_into_all(float* const* slots, int world, std::size_t n, float scale) {
  constexpr std::size_t kBlock = 1024;  // 4 KiB: the partial sums stay in L1 between the passes
  float sum[kBlock];
  for (std::size_t at = 0; at < n; at += kBlock) {
    const std::size_t m = std::min(kBlock, n - at);
    const float* __restrict a = slots[0] + at;
    const float* __restrict b = slots[1] + at;
    for (std::size_t i = 0; i < m; ++i) sum[i] = a[i] * scale + b[i] * scale;
    for (int r = 2; r < world; ++r) {
      const float* __restrict c = slots[r] + at;
      for (std::size_t i = 0; i < m; ++i) sum[i] += c[i] * scale;
    }
    for (int r = 0; r < world; ++r) std::memcpy(slots[r] + at, sum, m * sizeof(float));
  }
}

}  // namespace

NodeGroup::SlotsOp NodeGroup::start_slots(std::size_t offset, std::size_t count, float scale, RidingBroadcast then) {
  if (offset > slot_floats() || count > slot_floats() - offset)
    fail("node reduce group '/{}': summing slot floats [{}, {}) but a slot holds {}", name(), offset, offset + count,
         slot_floats());
  if (then.bytes > 0) check_root(then.root);
  SlotsOp op;
  op.index = slots_ops_++;
  op.first_piece = pieces_;
  // At least one piece, even for no floats: an op is done only once some rank summed a piece, which
  // it did only after every rank had started the op (so the riding bytes are there).
  op.pieces = std::max<std::uint64_t>(1, (count + kSlotPiece - 1) / kSlotPiece);
  pieces_ += op.pieces;
  op.offset = offset;
  op.count = count;
  op.scale = scale;
  op.then = then;
  if (then.bytes > 0 && then.bytes <= chunk_) {
    op.rides = true;
    op.parity = riders_++;
    if (rank_ == then.root) std::memcpy(rider(op.parity), then.data, then.bytes);
  }
  lane(rank_).slots_started.store(op.index + 1);
  ring();
  return op;
}

void NodeGroup::sum_piece(const SlotsOp& op, std::uint64_t piece) {
  const std::size_t lo = op.offset + piece * kSlotPiece;
  const std::size_t n = std::min(kSlotPiece, op.offset + op.count - lo);
  float* at[kReduceMaxWorld];
  for (int r = 0; r < world_; ++r) at[r] = slot(r) + lo;
  sum_into_all(at, world_, n, op.scale);
}

NodeGroup::Outcome NodeGroup::finish_slots(const SlotsOp& op, std::chrono::milliseconds timeout) {
  if (!broken_) return broken_;
  const auto deadline = Clock::now() + timeout;
  const std::uint64_t end = op.first_piece + op.pieces;
  ReduceControl& c = control();
  broken_ = wait_while(
      [&]() -> std::optional<int> {
        for (int r = 0; r < world_; ++r)
          if (lane(r).slots_started.load() <= op.index) return r;  // not handed over yet
        for (std::uint64_t piece = c.pieces_claimed.load(); piece < end;) {
          if (piece < op.first_piece)  // every rank claims only pieces of ops that all ranks started
            fail(
                "node reduce group '/{}' counts {} pieces taken on, fewer than the {} done before this op: the segment "
                "was written by something else than this job's ranks; restart the job",
                name(), piece, op.first_piece);
          if (c.pieces_claimed.compare_exchange_weak(piece, piece + 1)) {
            sum_piece(op, piece - op.first_piece);
            if (c.pieces_summed.fetch_add(1) + 1 >= end) ring();
            piece = c.pieces_claimed.load();
          }
        }
        if (c.pieces_summed.load() >= end) return std::nullopt;
        return -1;  // the last pieces are being summed by another rank
      },
      deadline);
  if (!broken_) return broken_;
  if (op.then.bytes == 0) return {};
  if (!op.rides) return broadcast_until(op.then.data, op.then.bytes, op.then.root, deadline);
  if (rank_ != op.then.root) std::memcpy(op.then.data, rider(op.parity), op.then.bytes);
  return {};
}

}  // namespace tandem::shm
