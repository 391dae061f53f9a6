#include "shm/control_block.hpp"

#include <unistd.h>

#include <fmt/format.h>

#include <array>
#include <bit>
#include <cstring>
#include <stdexcept>
#include <thread>

#include "common/clock.hpp"
#include "common/error.hpp"

namespace tandem::shm {

std::string ProcessSnapshot::name() const {
  if (group.empty()) return fmt::format("{}.{}", role_name(role), index);
  return fmt::format("{}.{}", group, group_index);
}

namespace {

constexpr std::size_t kJobBytes = sizeof(JobControl);
constexpr std::string_view kAttachFix = "is the job still running? `tandem status` with no argument lists running jobs";

void copy_string(char* dst, std::size_t capacity, std::string_view src, std::string_view what) {
  if (src.size() >= capacity) fail("{} '{}' is too long ({} bytes, at most {})", what, src, src.size(), capacity - 1);
  std::memcpy(dst, src.data(), src.size());
  dst[src.size()] = '\0';
}

void clear_metrics(ProcessRow& r) {
  // Only called while no process owns the row: make the seqlock odd, zero the words, make it even.
  std::uint64_t s = r.metrics_seq.load(std::memory_order_relaxed) | 1u;
  r.metrics_seq.store(s, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  for (auto& word : r.metrics) word.store(0, std::memory_order_relaxed);
  r.metrics_seq.store(s + 1, std::memory_order_release);
}

}  // namespace

ControlBlock ControlBlock::create(const Spec& spec) {
  if (spec.learners == 0 || spec.learners > kMaxLearners)
    fail("a job needs 1 to {} learner ranks, not {}", kMaxLearners, spec.learners);
  if (spec.actors > kMaxActors) fail("a job has at most {} actors, not {}", kMaxActors, spec.actors);
  const std::uint32_t rows = spec.learners + spec.actors;
  if (!spec.groups.empty() && spec.groups.size() != rows)
    throw std::logic_error(fmt::format("control block: {} row groups for {} rows", spec.groups.size(), rows));
  for (const auto& g : spec.groups)
    if (g.name.size() > kGroupNameBytes)
      fail("program group name '{}' is too long ({} bytes, at most {})", g.name, g.name.size(), kGroupNameBytes);
  Segment seg = Segment::create(job_segment_name(spec.job, Kind::control), Kind::control, kControlLayoutVersion,
                                kJobBytes + rows * sizeof(ProcessRow),
                                "a job with this id is running or crashed: choose another run.job, or "
                                "remove stale segments with `tandem shm gc`");
  auto& d = seg.descriptor_as<ControlDescriptor>();
  d.row_count = rows;
  d.learner_count = spec.learners;
  d.actor_count = spec.actors;
  d.row_bytes = sizeof(ProcessRow);
  d.job_offset = 0;
  d.rows_offset = kJobBytes;
  d.launcher_pid = static_cast<std::int32_t>(::getpid());
  d.started_unix_ns = seg.header().created_unix_ns;
  d.started_mono_ns = monotonic_ns();
  copy_string(d.job, sizeof d.job, spec.job, "job id");
  copy_string(d.run_dir, sizeof d.run_dir, spec.run_dir, "run directory");

  ControlBlock block(std::move(seg));
  JobControl& job = block.job_control();
  job.stop.store(0, std::memory_order_relaxed);
  job.stop_reason.store(static_cast<std::uint32_t>(StopReason::none), std::memory_order_relaxed);
  job.launcher_heartbeat_ns.store(d.started_mono_ns, std::memory_order_relaxed);
  job.nccl_id_state.store(static_cast<std::uint32_t>(NcclIdState::empty), std::memory_order_relaxed);
  for (std::uint32_t i = 0; i < rows; ++i) {
    ProcessRow& r = block.row(i);
    r.role = i < spec.learners ? Role::learner : Role::actor;
    r.index = i < spec.learners ? i : i - spec.learners;
    std::memset(r.group, 0, sizeof r.group);
    r.no_heartbeat = 0;
    if (!spec.groups.empty()) {
      std::memcpy(r.group, spec.groups[i].name.data(), spec.groups[i].name.size());
      r.no_heartbeat = spec.groups[i].heartbeat ? 0 : 1;
    }
    r.state.store(static_cast<std::uint32_t>(ProcessState::empty), std::memory_order_relaxed);
    r.exit_status.store(-1, std::memory_order_relaxed);
  }
  block.segment_.mark_ready();  // release: the descriptor and rows above are visible to attachers
  return block;
}

ControlBlock ControlBlock::attach(std::string_view job, Segment::Access access) {
  ControlBlock block(
      Segment::attach(job_segment_name(job, Kind::control), Kind::control, kControlLayoutVersion, access, kAttachFix));
  const auto& d = block.descriptor();
  const std::uint64_t needed = d.rows_offset + std::uint64_t{d.row_count} * sizeof(ProcessRow);
  // Counts are capped before they are added, so the sum cannot wrap; `needed` then fits in 64 bits.
  if (d.row_bytes != sizeof(ProcessRow) || d.rows_offset != kJobBytes || d.job_offset != 0 || d.learner_count < 1 ||
      d.learner_count > kMaxLearners || d.actor_count > kMaxActors || d.row_count != d.learner_count + d.actor_count ||
      needed > block.segment_.payload_size())
    fail(ErrorKind::corrupt_segment, "control block '/{}' has an inconsistent descriptor ({} rows of {} bytes): {}",
         block.segment_.name(), d.row_count, d.row_bytes, kAttachFix);
  if (strnlen(d.job, sizeof d.job) == sizeof d.job || strnlen(d.run_dir, sizeof d.run_dir) == sizeof d.run_dir)
    fail(ErrorKind::corrupt_segment, "control block '/{}' has an unterminated job id or run directory: {}",
         block.segment_.name(), kAttachFix);
  for (std::uint32_t i = 0; i < d.row_count; ++i) {  // rows are laid out learners first (the format)
    const ProcessRow& r = block.row(i);
    const bool learner = i < d.learner_count;
    if (r.role != (learner ? Role::learner : Role::actor) || r.index != (learner ? i : i - d.learner_count))
      fail(ErrorKind::corrupt_segment, "control block '/{}' has row {} out of place: {}", block.segment_.name(), i,
           kAttachFix);
  }
  return block;
}

std::uint32_t ControlBlock::row_of(Role role, std::uint32_t index) const {
  const auto& d = descriptor();
  const std::uint32_t count = role == Role::learner ? d.learner_count : d.actor_count;
  if (index >= count)
    fail("job '{}' has {} {} process{}, so {} index {} does not exist: check TANDEM_INDEX", d.job, count,
         role_name(role), count == 1 ? "" : "es", role_name(role), index);
  return role == Role::learner ? index : d.learner_count + index;
}

ProcessRow& ControlBlock::row(std::uint32_t row) const {
  if (row >= descriptor().row_count) throw std::out_of_range(fmt::format("control block row {}", row));
  return reinterpret_cast<ProcessRow*>(segment_.payload() + descriptor().rows_offset)[row];
}

JobControl& ControlBlock::job_control() const {
  return *reinterpret_cast<JobControl*>(segment_.payload() + descriptor().job_offset);
}

void ControlBlock::request_stop(StopReason reason) const {
  JobControl& job = job_control();
  if (job.stop.load(std::memory_order_relaxed) != 0) return;  // the first reason stays
  job.stop_reason.store(static_cast<std::uint32_t>(reason), std::memory_order_relaxed);
  job.stop_mono_ns.store(monotonic_ns(), std::memory_order_relaxed);
  job.stop.store(1, std::memory_order_release);
}

bool ControlBlock::stop_requested() const { return job_control().stop.load(std::memory_order_acquire) != 0; }

StopReason ControlBlock::stop_reason() const {
  if (!stop_requested()) return StopReason::none;  // acquire: the reason below is the one stored with it
  return static_cast<StopReason>(job_control().stop_reason.load(std::memory_order_relaxed));
}

void ControlBlock::begin_spawn(std::uint32_t index, std::uint32_t restarts) const {
  ProcessRow& r = row(index);
  const std::uint64_t now = monotonic_ns();
  r.pid.store(0, std::memory_order_relaxed);
  r.restarts.store(restarts, std::memory_order_relaxed);
  r.exit_status.store(-1, std::memory_order_relaxed);
  r.spawned_ns.store(now, std::memory_order_relaxed);
  r.heartbeat_ns.store(now, std::memory_order_relaxed);
  r.version_seen.store(0, std::memory_order_relaxed);
  clear_metrics(r);
  r.state.store(static_cast<std::uint32_t>(ProcessState::starting), std::memory_order_relaxed);
}

void ControlBlock::set_pid(std::uint32_t index, std::int32_t pid) const {
  row(index).pid.store(pid, std::memory_order_relaxed);
}

void ControlBlock::end_process(std::uint32_t index, ProcessState state, std::int32_t exit_status) const {
  ProcessRow& r = row(index);
  r.exit_status.store(exit_status, std::memory_order_relaxed);
  r.state.store(static_cast<std::uint32_t>(state), std::memory_order_relaxed);
}

void ControlBlock::set_state(std::uint32_t index, ProcessState state) const {
  row(index).state.store(static_cast<std::uint32_t>(state), std::memory_order_relaxed);
}

ProcessSnapshot ControlBlock::snapshot(std::uint32_t index) const {
  const ProcessRow& r = row(index);
  ProcessSnapshot s;
  s.role = r.role;
  s.index = r.index;
  s.pid = r.pid.load(std::memory_order_relaxed);
  s.state = static_cast<ProcessState>(r.state.load(std::memory_order_relaxed));
  s.restarts = r.restarts.load(std::memory_order_relaxed);
  s.exit_status = r.exit_status.load(std::memory_order_relaxed);
  s.spawned_ns = r.spawned_ns.load(std::memory_order_relaxed);
  s.heartbeat_ns = r.heartbeat_ns.load(std::memory_order_relaxed);
  s.version_seen = r.version_seen.load(std::memory_order_relaxed);
  s.metrics = read_metrics(index);
  s.group.assign(r.group, strnlen(r.group, sizeof r.group));
  s.heartbeat = r.no_heartbeat == 0;
  s.group_index = s.index;
  // Rows of a group are contiguous (the format): its place is the count of the same group's rows
  // before it. The role's own group starts at index 0, so it needs no walk.
  if (!s.group.empty() && s.group != role_name(s.role)) {
    s.group_index = 0;
    for (std::uint32_t i = index; i > 0; --i) {
      const ProcessRow& before = row(i - 1);
      if (before.role != r.role || std::memcmp(before.group, r.group, sizeof r.group) != 0) break;
      ++s.group_index;
    }
  }
  return s;
}

std::optional<ProcessMetrics> ControlBlock::read_metrics(std::uint32_t index) const {
  const ProcessRow& r = row(index);
  // Bounded: a writer killed mid-record leaves the seqlock odd forever; after ~1 ms of retries the
  // record is reported missing rather than waited for.
  for (int attempt = 0; attempt < 1000; ++attempt) {
    const std::uint64_t before = r.metrics_seq.load(std::memory_order_acquire);
    if (before & 1u) {
      if (attempt > 16) std::this_thread::yield();
      continue;
    }
    std::array<std::uint64_t, kMetricWords> words;
    for (std::size_t i = 0; i < kMetricWords; ++i) words[i] = r.metrics[i].load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (r.metrics_seq.load(std::memory_order_relaxed) != before) continue;
    auto m = std::bit_cast<ProcessMetrics>(words);
    if (m.updated_ns == 0) return std::nullopt;
    return m;
  }
  return std::nullopt;
}

void ControlBlock::write_metrics(std::uint32_t index, const ProcessMetrics& metrics) const {
  ProcessRow& r = row(index);
  const auto words = std::bit_cast<std::array<std::uint64_t, kMetricWords>>(metrics);
  const std::uint64_t s = r.metrics_seq.load(std::memory_order_relaxed);
  r.metrics_seq.store(s + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);  // the odd value is visible before any word
  for (std::size_t i = 0; i < kMetricWords; ++i) r.metrics[i].store(words[i], std::memory_order_relaxed);
  r.metrics_seq.store(s + 2, std::memory_order_release);
}

}  // namespace tandem::shm
