#include "shm/node_group.hpp"

#include <fmt/format.h>
#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <ctime>

#include "common/error.hpp"
#include "common/process.hpp"

namespace tandem::shm {
namespace {

constexpr std::size_t kLanesOffset = sizeof(ReduceControl);
constexpr auto kLivenessSlice = std::chrono::milliseconds(100);
constexpr auto kSpinFor = std::chrono::microseconds(200);

std::uint64_t data_offset(int world) { return align_up(kLanesOffset + sizeof(RankLane) * world, 4096); }
std::uint64_t slots_offset(int world, std::size_t chunk) {
  return align_up(data_offset(world) + (2 * static_cast<std::uint64_t>(world) + 2) * chunk, 4096);
}
std::uint64_t payload_bytes(int world, std::size_t chunk, std::size_t slot_bytes) {
  if (slot_bytes == 0) return slots_offset(world, chunk);
  return slots_offset(world, chunk) + 2 * static_cast<std::uint64_t>(chunk) +
         static_cast<std::uint64_t>(world) * slot_bytes;
}

// Shared futex (no FUTEX_PRIVATE_FLAG): the waiters are other processes.
void futex_wait(std::atomic<std::uint32_t>& word, std::uint32_t expected, std::chrono::nanoseconds timeout) {
  const auto ns = std::max<std::int64_t>(timeout.count(), 0);
  timespec ts{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
  // EAGAIN (the word moved), EINTR and ETIMEDOUT all mean "look again".
  (void)::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}
void futex_wake_all(std::atomic<std::uint32_t>& word) {
  (void)::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

inline void cpu_relax() {
#if defined(__x86_64__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// dst = src x scale: the ranks' average fused into the copy in (x 1 is a plain copy).
void copy_scaled(std::byte* dst, const float* __restrict src, std::size_t n, float scale) {
  if (scale == 1.0f) {
    std::memcpy(dst, src, n * sizeof(float));
    return;
  }
  float* __restrict out = reinterpret_cast<float*>(dst);
  for (std::size_t i = 0; i < n; ++i) out[i] = src[i] * scale;
}

// out[i] = sum over ranks of in_r[i], in rank order.
void sum_rows(float* __restrict out, const float* const* rows, int world, std::size_t n) {
  const float* __restrict a = rows[0];
  const float* __restrict b = rows[1];
  for (std::size_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
  for (int r = 2; r < world; ++r) {
    const float* __restrict c = rows[r];
    for (std::size_t i = 0; i < n; ++i) out[i] += c[i];
  }
}

}  // namespace

std::string NodeGroup::Outcome::describe() const {
  switch (status) {
    case Status::ok: return "ok";
    case Status::rank_exited: return fmt::format("rank {} exited", rank);
    case Status::timed_out: return fmt::format("rank {} did not arrive in time (it hangs, or never started)", rank);
    case Status::aborted: return rank < 0 ? std::string("the group was aborted") : fmt::format("rank {} aborted", rank);
  }
  return "unknown";
}

NodeGroup::NodeGroup(Segment segment, int rank) : segment_(std::make_shared<Segment>(std::move(segment))), rank_(rank) {
  const auto& d = segment_->descriptor_as<ReduceDescriptor>();
  world_ = static_cast<int>(d.world);
  chunk_ = d.chunk_bytes;
  slot_bytes_ = d.slot_bytes;
  RankLane& me = lane(rank_);
  const auto self = process_identity(static_cast<std::uint32_t>(::getpid()));
  me.start_ticks.store(self ? self->start_ticks : 0);
  std::uint32_t none = 0;
  if (!me.pid.compare_exchange_strong(none, static_cast<std::uint32_t>(::getpid())))
    fail("node reduce group '/{}': rank {} already joined it (pid {}): give every rank its own RANK", name(), rank_,
         none);
}

NodeGroup NodeGroup::create(std::string_view job, int world, std::size_t chunk_bytes, std::size_t slot_floats) {
  if (world < 2 || world > kReduceMaxWorld)
    fail("a node reduce group needs 2..{} ranks on the node, not {}: use Gloo (ddp.cpu_collectives = \"gloo\")",
         kReduceMaxWorld, world);
  chunk_bytes = align_up(std::max<std::size_t>(chunk_bytes, 64), 64);
  const std::size_t slot_bytes = align_up(slot_floats * sizeof(float), 64);
  // The pid makes the name this process's alone: an object under it is a dead process's leftover.
  const std::string name = reduce_segment_name(job, ::getpid(), slot_floats > 0);
  Segment::unlink(name);
  Segment seg = Segment::create(name, Kind::reduce, kReduceLayoutVersion, payload_bytes(world, chunk_bytes, slot_bytes),
                                "another rank 0 of this job is running on the node: stop it first");
  auto& d = seg.descriptor_as<ReduceDescriptor>();
  d.world = static_cast<std::uint32_t>(world);
  d.chunk_bytes = chunk_bytes;
  d.data_offset = data_offset(world);
  d.slot_bytes = slot_bytes;
  seg.mark_ready();
  return NodeGroup(std::move(seg), 0);
}

NodeGroup NodeGroup::attach(const std::string& name, int rank, int world) {
  const std::string fix = "start every rank of the job from the same launch (tandem run or torchrun)";
  Segment seg = Segment::attach(name, Kind::reduce, kReduceLayoutVersion, Segment::Access::read_write, fix);
  const auto& d = seg.descriptor_as<ReduceDescriptor>();
  if (static_cast<int>(d.world) != world || rank <= 0 || rank >= world)
    fail("node reduce group '/{}' is for {} ranks, but this is rank {} of {}: {}", name, d.world, rank, world, fix);
  // chunk_bytes and slot_bytes first: bounded by the mapping, the size computed from them cannot overflow.
  if (d.chunk_bytes == 0 || d.chunk_bytes % 64 != 0 || d.chunk_bytes > seg.payload_size() || d.slot_bytes % 64 != 0 ||
      d.slot_bytes > seg.payload_size() || d.data_offset != data_offset(world) ||
      payload_bytes(world, d.chunk_bytes, d.slot_bytes) > seg.payload_size())
    fail(ErrorKind::corrupt_segment,
         "node reduce group '/{}' has a corrupt descriptor (chunk {} bytes, data at {}, slots {} bytes, payload {} "
         "bytes): {}",
         name, d.chunk_bytes, d.data_offset, d.slot_bytes, seg.payload_size(), fix);
  return NodeGroup(std::move(seg), rank);
}

ReduceControl& NodeGroup::control() const { return *reinterpret_cast<ReduceControl*>(segment_->payload()); }
RankLane& NodeGroup::lane(int rank) const {
  return reinterpret_cast<RankLane*>(segment_->payload() + kLanesOffset)[rank];
}
std::byte* NodeGroup::in(std::uint64_t round, int rank) const {
  return segment_->payload() + data_offset(world_) + ((round & 1) * world_ + rank) * chunk_;
}
std::byte* NodeGroup::out(std::uint64_t round) const {
  return segment_->payload() + data_offset(world_) + (2 * world_ + (round & 1)) * chunk_;
}
std::byte* NodeGroup::rider(std::uint64_t parity) const {
  return segment_->payload() + slots_offset(world_, chunk_) + (parity & 1) * chunk_;
}
float* NodeGroup::slot(int rank) const {
  if (slot_bytes_ == 0) return nullptr;
  return reinterpret_cast<float*>(segment_->payload() + slots_offset(world_, chunk_) + 2 * chunk_ + rank * slot_bytes_);
}

NodeGroup::Outcome NodeGroup::join(std::chrono::milliseconds timeout) {
  Outcome o = barrier(Clock::now() + timeout);
  // Every rank has mapped it (or the group failed): the name is no longer needed by anyone.
  if (rank_ == 0) segment_->unlink_now();
  return o;
}

NodeGroup::Outcome NodeGroup::all_reduce_sum(float* data, std::size_t count, float scale,
                                             std::chrono::milliseconds timeout, RidingBroadcast then) {
  if (then.bytes > 0) check_root(then.root);
  const auto deadline = Clock::now() + timeout;
  const std::size_t per_round = chunk_ / sizeof(float);
  for (std::size_t done = 0; done < count; done += per_round) {
    const std::size_t n = std::min(per_round, count - done);
    const std::size_t tail_at = align_up(n * sizeof(float), 64);
    const bool carries = done + n == count && then.bytes > 0 && tail_at <= chunk_ && then.bytes <= chunk_ - tail_at;
    copy_scaled(in(rounds_, rank_), data + done, n, scale);
    if (carries && rank_ == then.root) std::memcpy(in(rounds_, rank_) + tail_at, then.data, then.bytes);
    if (Outcome o = barrier(deadline); !o) return o;
    if (carries) {
      if (rank_ != then.root) std::memcpy(then.data, in(rounds_, then.root) + tail_at, then.bytes);
      then.bytes = 0;
    }
    if (world_ == 2) {
      // Both ranks sum both parts, in rank order, straight into their own data: the same bits on
      // both, one barrier a round instead of two and no copy out. The parity buffers make it safe:
      // a rank can only write this round's slot again two rounds on, past a barrier the other rank reaches
      // only after these reads.
      const float* both[2] = {reinterpret_cast<const float*>(in(rounds_, 0)),
                              reinterpret_cast<const float*>(in(rounds_, 1))};
      sum_rows(data + done, both, 2, n);
      ++rounds_;
      continue;
    }
    const std::size_t lo = n * rank_ / world_, hi = n * (rank_ + 1) / world_;
    const float* rows[kReduceMaxWorld];
    for (int r = 0; r < world_; ++r) rows[r] = reinterpret_cast<const float*>(in(rounds_, r)) + lo;
    sum_rows(reinterpret_cast<float*>(out(rounds_)) + lo, rows, world_, hi - lo);
    if (Outcome o = barrier(deadline); !o) return o;
    std::memcpy(data + done, out(rounds_), n * sizeof(float));
    ++rounds_;
  }
  if (then.bytes > 0) return broadcast_until(then.data, then.bytes, then.root, deadline);
  return {};
}

NodeGroup::Outcome NodeGroup::broadcast(void* data, std::size_t bytes, int root, std::chrono::milliseconds timeout) {
  check_root(root);
  return broadcast_until(data, bytes, root, Clock::now() + timeout);
}

void NodeGroup::check_root(int root) const {
  if (root < 0 || root >= world_)
    fail("node reduce group: a broadcast from rank {}, which is not one of its {} ranks", root, world_);
}

NodeGroup::Outcome NodeGroup::broadcast_until(void* data, std::size_t bytes, int root, Clock::time_point deadline) {
  auto* bytes_of = static_cast<std::byte*>(data);
  for (std::size_t done = 0; done < bytes; done += chunk_) {
    const std::size_t n = std::min(chunk_, bytes - done);
    if (rank_ == root) std::memcpy(in(rounds_, root), bytes_of + done, n);
    if (Outcome o = barrier(deadline); !o) return o;
    if (rank_ != root) std::memcpy(bytes_of + done, in(rounds_, root), n);
    ++rounds_;
  }
  return {};
}

void NodeGroup::abort() {
  if (!segment_ || !segment_->base()) return;
  std::uint32_t none = 0;
  control().aborted_by.compare_exchange_strong(none, static_cast<std::uint32_t>(rank_ + 1));
  ring();
}

void NodeGroup::ring() {
  control().bell.fetch_add(1);
  futex_wake_all(control().bell);
}

NodeGroup::Outcome NodeGroup::barrier(Clock::time_point deadline) {
  if (!broken_) return broken_;
  lane(rank_).arrived.store(++barriers_);
  ring();
  const std::uint64_t k = barriers_;
  broken_ = wait_while(
      [&]() -> std::optional<int> {
        const int behind = first_rank_behind(k);
        return behind < 0 ? std::nullopt : std::optional<int>(behind);
      },
      deadline);
  return broken_;
}

int NodeGroup::first_rank_behind(std::uint64_t barrier) const {
  for (int r = 0; r < world_; ++r)
    if (lane(r).arrived.load() < barrier) return r;
  return -1;
}

bool NodeGroup::lane_exited(int rank) const {
  const std::uint32_t pid = lane(rank).pid.load();
  if (pid == 0) return false;  // not attached yet: only the deadline can tell
  return !process_alive(pid, lane(rank).start_ticks.load());
}

NodeGroup::Outcome NodeGroup::wait_while(const std::function<std::optional<int>()>& holdup,
                                         Clock::time_point deadline) {
  using Status = Outcome::Status;
  auto next_check = Clock::now();
  const auto spin_until = next_check + kSpinFor;
  for (;;) {
    const std::uint32_t bell = control().bell.load();
    // What every rank did stands even if one aborted since: the abort fails the next wait.
    const std::optional<int> behind = holdup();
    if (!behind) return {};
    if (const std::uint32_t by = control().aborted_by.load(); by != 0)
      return {Status::aborted, by <= static_cast<std::uint32_t>(world_) ? static_cast<int>(by) - 1 : -1};
    const auto now = Clock::now();
    if (now < spin_until) {
      for (int i = 0; i < 16; ++i) cpu_relax();
      ::sched_yield();  // where ranks outnumber cores, the rank this one waits for may need this core
      continue;
    }
    if (now >= next_check) {
      for (int r = 0; r < world_; ++r)
        if (r != rank_ && (*behind < 0 || r == *behind) && lane_exited(r)) return {Status::rank_exited, r};
      next_check = now + kLivenessSlice;
    }
    if (now >= deadline) return {Status::timed_out, *behind};
    futex_wait(control().bell, bell, std::min(deadline, next_check) - now);
  }
}

}  // namespace tandem::shm
