#include "shm/control_block.hpp"

#include <time.h>
#include <unistd.h>

#include <fmt/format.h>

#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "common/error.hpp"

namespace tandem::shm {

std::string_view role_name(Role role) {
  switch (role) {
    case Role::learner: return "learner";
    case Role::actor: return "actor";
  }
  return "unknown";
}

std::optional<Role> parse_role(std::string_view name) {
  if (name == "learner") return Role::learner;
  if (name == "actor") return Role::actor;
  return std::nullopt;
}

std::string_view state_name(ProcessState state) {
  switch (state) {
    case ProcessState::empty: return "empty";
    case ProcessState::starting: return "starting";
    case ProcessState::running: return "running";
    case ProcessState::stopping: return "stopping";
    case ProcessState::exited: return "exited";
    case ProcessState::failed: return "failed";
    case ProcessState::waiting: return "waiting";
  }
  return "unknown";
}

std::string_view stop_reason_name(StopReason reason) {
  switch (reason) {
    case StopReason::none: return "none";
    case StopReason::finished: return "finished";
    case StopReason::interrupted: return "interrupted";
    case StopReason::failure: return "failure";
  }
  return "unknown";
}

std::string ProcessSnapshot::name() const { return fmt::format("{}.{}", role_name(role), index); }

namespace {

constexpr std::size_t kJobBytes = sizeof(JobControl);
constexpr std::string_view kAttachFix =
    "is the job still running? `tandem status` with no argument lists running jobs";

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

// ---- ControlBlock ----

ControlBlock ControlBlock::create(const Spec& spec) {
  if (spec.learners == 0 || spec.learners > kMaxLearners)
    fail("a job needs 1 to {} learner ranks, not {}", kMaxLearners, spec.learners);
  if (spec.actors > kMaxActors) fail("a job has at most {} actors, not {}", kMaxActors, spec.actors);
  const std::uint32_t rows = spec.learners + spec.actors;
  Segment seg = Segment::create(job_segment_name(spec.job, "ctl"), Kind::control, kControlLayoutVersion,
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
    r.state.store(static_cast<std::uint32_t>(ProcessState::empty), std::memory_order_relaxed);
    r.exit_status.store(-1, std::memory_order_relaxed);
  }
  block.segment_.mark_ready();  // release: the descriptor and rows above are visible to attachers
  return block;
}

ControlBlock ControlBlock::attach(std::string_view job, Segment::Access access) {
  ControlBlock block(Segment::attach(job_segment_name(job, "ctl"), Kind::control, kControlLayoutVersion,
                                     access, kAttachFix));
  const auto& d = block.descriptor();
  const std::uint64_t needed = d.rows_offset + std::uint64_t{d.row_count} * sizeof(ProcessRow);
  if (d.row_bytes != sizeof(ProcessRow) || d.rows_offset != kJobBytes || d.job_offset != 0 ||
      d.row_count != d.learner_count + d.actor_count || needed > block.segment_.payload_size())
    fail("control block '/{}' has an inconsistent descriptor ({} rows of {} bytes): {}",
         block.segment_.name(), d.row_count, d.row_bytes, kAttachFix);
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

// ---- ControlClient ----

namespace {
std::string env_or_empty(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}
}  // namespace

std::optional<ControlClient> ControlClient::from_env() {
  const std::string job = env_or_empty("TANDEM_JOB");
  if (job.empty()) return std::nullopt;
  const std::string role_text = env_or_empty("TANDEM_ROLE");
  auto role = parse_role(role_text);
  if (!role) fail("TANDEM_ROLE='{}' is not a role: it must be learner or actor (set by `tandem run`)", role_text);
  const std::string index_text = env_or_empty("TANDEM_INDEX");
  std::uint32_t index = 0;
  auto [end, ec] = std::from_chars(index_text.data(), index_text.data() + index_text.size(), index);
  if (index_text.empty() || ec != std::errc{} || end != index_text.data() + index_text.size())
    fail("TANDEM_INDEX='{}' is not a process index: it must be a number (set by `tandem run`)", index_text);
  // The launcher reads our stdout through a pipe: line buffering shows each line when it is written.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  return attach(job, *role, index);
}

ControlClient ControlClient::attach(std::string_view job, Role role, std::uint32_t index) {
  ControlBlock block = ControlBlock::attach(job, Segment::Access::read_write);
  const std::uint32_t row = block.row_of(role, index);
  return ControlClient(std::move(block), role, index, row);
}

ControlClient::ControlClient(ControlBlock block, Role role, std::uint32_t index, std::uint32_t row)
    : block_(std::move(block)), role_(role), index_(index), row_(row) {
  ProcessRow& r = block_.row(row_);
  r.pid.store(static_cast<std::int32_t>(::getpid()), std::memory_order_relaxed);
  heartbeat();
}

ControlClient::ControlClient(ControlClient&& other) noexcept
    : block_(std::move(other.block_)),
      role_(other.role_),
      index_(other.index_),
      row_(other.row_),
      local_stop_(other.local_stop_.load()) {}

std::string ControlClient::name() const { return fmt::format("{}.{}", role_name(role_), index_); }

std::uint32_t ControlClient::restarts() const {
  return block_.row(row_).restarts.load(std::memory_order_relaxed);
}

void ControlClient::heartbeat() const {
  block_.row(row_).heartbeat_ns.store(monotonic_ns(), std::memory_order_relaxed);
}

void ControlClient::set_state(ProcessState state) const {
  if (state != ProcessState::running && state != ProcessState::stopping)
    throw std::logic_error("a process may only set its state to running or stopping");
  block_.set_state(row_, state);
}

void ControlClient::saw_version(std::uint64_t version) const {
  block_.row(row_).version_seen.store(version, std::memory_order_relaxed);
}

void ControlClient::report(ProcessMetrics metrics) {
  metrics.updated_ns = monotonic_ns();
  std::lock_guard lock(report_mutex_);  // the seqlock has one writer
  block_.write_metrics(row_, metrics);
}

bool ControlClient::should_stop() const {
  return local_stop_.load(std::memory_order_relaxed) || block_.stop_requested();
}

void ControlClient::publish_nccl_id(std::span<const std::byte> id) const {
  if (id.size() > kNcclIdBytes) throw std::logic_error("an NCCL unique id is at most 128 bytes");
  JobControl& job = block_.job_control();
  auto expected = static_cast<std::uint32_t>(NcclIdState::empty);
  if (!job.nccl_id_state.compare_exchange_strong(expected, static_cast<std::uint32_t>(NcclIdState::writing),
                                                 std::memory_order_relaxed))
    throw std::logic_error("the NCCL unique id of this job was already published");
  std::memset(job.nccl_id, 0, kNcclIdBytes);
  std::memcpy(job.nccl_id, id.data(), id.size());
  job.nccl_id_state.store(static_cast<std::uint32_t>(NcclIdState::published), std::memory_order_release);
}

std::optional<std::array<std::byte, kNcclIdBytes>> ControlClient::wait_nccl_id(
    std::chrono::milliseconds timeout) const {
  const JobControl& job = block_.job_control();
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    if (job.nccl_id_state.load(std::memory_order_acquire) == static_cast<std::uint32_t>(NcclIdState::published)) {
      std::array<std::byte, kNcclIdBytes> id;
      std::memcpy(id.data(), job.nccl_id, kNcclIdBytes);
      return id;
    }
    if (should_stop() || std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    heartbeat();  // waiting for rank 0 is not hanging
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

// ---- HeartbeatThread ----

HeartbeatThread::HeartbeatThread(const ControlClient& client, std::chrono::milliseconds period,
                                 std::chrono::milliseconds stall_limit)
    : client_(client), period_(period), stall_limit_(stall_limit), last_tick_ns_(monotonic_ns()) {
  client_.heartbeat();
  thread_ = std::thread([this] { loop(); });
}

HeartbeatThread::~HeartbeatThread() {
  {
    std::lock_guard lock(mutex_);
    quit_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void HeartbeatThread::loop() {
  std::unique_lock lock(mutex_);
  while (!quit_) {
    const auto stall_ns = static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(stall_limit_).count());
    if (stall_ns == 0 || monotonic_ns() - last_tick_ns_.load(std::memory_order_relaxed) < stall_ns)
      client_.heartbeat();
    wake_.wait_for(lock, period_, [this] { return quit_; });
  }
}

}  // namespace tandem::shm
