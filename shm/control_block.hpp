// The control block `/tandem.<job>.ctl`: one per job, created by the launcher (`tandem run`), through
// which the launcher and every process of the job see each other. Layout (docs/FORMAT.md, "Control
// block"): the segment header, a ControlDescriptor at byte 64, then the payload: a JobControl record
// (512 bytes) followed by one 256-byte ProcessRow per process: learner ranks first (row r = rank r),
// then actors (row learners + i = actor i).
//
// Who writes what (everything else is read-only for everyone):
//  - The launcher writes the descriptor and the rows' identity (role, index) before mark_ready(); they
//    never change afterwards. It writes JobControl.stop (the stop request) and its own heartbeat.
//  - In a row, the launcher writes pid, restarts, spawned_ns, exit_status and `state` only while no
//    process owns the row: before it spawns the row's process (begin_spawn) and after it has reaped it
//    (end_process). Between those two points the row's process owns heartbeat_ns, version_seen,
//    the metrics record and `state` (running/stopping); it writes no other row. (The process also
//    stores its own pid at attach: the same value the launcher stores after fork.)
//  - Learner rank 0 writes the NCCL unique id once; the other ranks read it.
//
// Atomics and orders (all fields shared across processes are lock-free std::atomic, asserted below):
//  - heartbeat_ns, version_seen, restarts, pid, state, exit_status, spawned_ns: single words,
//    relaxed. Each is meaningful on its own; nobody infers other memory from them. Heartbeats and
//    versions are monotonic within one incarnation of a process.
//  - stop: the launcher stores it with release after stop_reason and stop_mono_ns; processes load it
//    with acquire (should_stop()), so the reason and time are visible with it.
//  - nccl_id_state: rank 0 CASes empty -> writing, copies the 128 id bytes, stores published with
//    release; readers load it with acquire before copying the bytes.
//  - The metrics record (ProcessMetrics, several words that belong together) is guarded by a per-row
//    seqlock: the writer makes metrics_seq odd (relaxed store + release fence), stores the words
//    relaxed, and makes it even again with release; a reader loads it with acquire, copies the words
//    relaxed, fences acquire and re-reads: equal and even means a complete record. Doubles are stored
//    as their IEEE-754 bit patterns in atomic<uint64_t>. A writer killed mid-record leaves the seqlock
//    odd; readers give up after bounded retries (no record) and the launcher resets it at respawn.
//  - Times are CLOCK_MONOTONIC nanoseconds (system-wide on Linux, so comparable across processes).
//
// No locks anywhere: a process killed at any instruction leaves the block usable.
// Threads: ControlBlock handles are move-only and owned by one thread. ControlClient's methods may be
// called from any thread of the child process (report() serialises its writers with a process-local
// mutex, so the one-writer rule of the seqlock holds).
#pragma once

#include <array>
#include <atomic>
#include <bit>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>

#include "shm/segment.hpp"

namespace tandem::shm {

inline constexpr std::uint32_t kControlLayoutVersion = 1;
inline constexpr std::size_t kNcclIdBytes = 128;   // sizeof(ncclUniqueId)
inline constexpr std::uint32_t kMaxLearners = 256;
inline constexpr std::uint32_t kMaxActors = 4096;

enum class Role : std::uint32_t { learner = 1, actor = 2 };
std::string_view role_name(Role role);                       // "learner", "actor"
std::optional<Role> parse_role(std::string_view name);

enum class ProcessState : std::uint32_t {
  empty = 0,     // never started
  starting = 1,  // spawned, has not said it is running yet (launcher)
  running = 2,   // working (process)
  stopping = 3,  // saw the stop request and is finishing (checkpoint, last evaluation) (process)
  exited = 4,    // exited with status 0 (launcher)
  failed = 5,    // exited non-zero, killed, or hung (launcher)
  waiting = 6,   // crashed; a restart is scheduled after a backoff (launcher)
};
std::string_view state_name(ProcessState state);

enum class StopReason : std::uint32_t { none = 0, finished = 1, interrupted = 2, failure = 3 };
std::string_view stop_reason_name(StopReason reason);

// One record of a process's metrics. Meaning by role:
//   learner:  step = optimizer steps done, version = latest weight version published, samples = samples
//             trained on, epoch, samples_per_s, loss = recent training loss, accuracy = recent training
//             accuracy, seconds = mean step time, lr = current learning rate.
//   actor (evaluator): step = evaluations done, version = weight version evaluated last, samples = test
//             samples in that evaluation, samples_per_s = its throughput, loss/accuracy = test loss and
//             accuracy, seconds = wall time of that evaluation.
// A double that was not measured is NaN; `updated_ns` is set by report() (0 = no record yet).
inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
struct ProcessMetrics {
  std::uint64_t updated_ns = 0;
  std::uint64_t step = 0;
  std::uint64_t version = 0;
  std::uint64_t samples = 0;
  std::uint64_t epoch = 0;
  double samples_per_s = kNaN;
  double loss = kNaN;
  double accuracy = kNaN;
  double seconds = kNaN;
  double lr = kNaN;
  std::uint64_t reserved[13] = {};
};
inline constexpr std::size_t kMetricWords = 23;
static_assert(std::is_trivially_copyable_v<ProcessMetrics> && std::is_standard_layout_v<ProcessMetrics>);
static_assert(sizeof(ProcessMetrics) == kMetricWords * 8);
static_assert(offsetof(ProcessMetrics, samples_per_s) == 40 && offsetof(ProcessMetrics, lr) == 72);

// ---- the shared layout (bytes that a Python reader can parse with docs/FORMAT.md) ----

struct ControlDescriptor {                  // at segment byte 64; immutable once ready
  std::uint32_t row_count;                  // learner_count + actor_count
  std::uint32_t learner_count;              // WORLD_SIZE
  std::uint32_t actor_count;
  std::uint32_t row_bytes;                  // sizeof(ProcessRow) = 256
  std::uint64_t job_offset;                 // of JobControl, from the payload start (0)
  std::uint64_t rows_offset;                // of row 0, from the payload start (512)
  std::int32_t launcher_pid;
  std::uint32_t reserved0;
  std::uint64_t started_unix_ns;            // when the launcher created the job (wall clock)
  std::uint64_t started_mono_ns;            // the same instant, CLOCK_MONOTONIC
  char job[72];                             // job id, NUL-terminated, e.g. "fmnist-3f9a"
  char run_dir[1024];                       // absolute run directory, NUL-terminated
};
static_assert(std::is_standard_layout_v<ControlDescriptor> && std::is_trivially_copyable_v<ControlDescriptor>);
static_assert(offsetof(ControlDescriptor, rows_offset) == 24);
static_assert(offsetof(ControlDescriptor, launcher_pid) == 32);
static_assert(offsetof(ControlDescriptor, started_unix_ns) == 40);
static_assert(offsetof(ControlDescriptor, job) == 56);
static_assert(offsetof(ControlDescriptor, run_dir) == 128);
static_assert(sizeof(ControlDescriptor) == 1152 && sizeof(ControlDescriptor) <= kDescriptorBytes);

enum class NcclIdState : std::uint32_t { empty = 0, writing = 1, published = 2 };

struct alignas(64) JobControl {             // payload byte 0, 512 bytes
  std::atomic<std::uint32_t> stop;          // 0 = run, 1 = stop requested; launcher, release/acquire
  std::atomic<std::uint32_t> stop_reason;   // StopReason; written before `stop`
  std::atomic<std::uint64_t> stop_mono_ns;  // when the stop was requested; written before `stop`
  std::atomic<std::uint64_t> launcher_heartbeat_ns;  // launcher, relaxed
  std::atomic<std::uint32_t> nccl_id_state; // NcclIdState; rank 0, release/acquire
  std::uint32_t reserved0;
  std::uint64_t reserved1[4];
  unsigned char nccl_id[kNcclIdBytes];      // byte 64: ncclUniqueId, valid once nccl_id_state is published
  std::uint64_t reserved2[40];
};
static_assert(std::is_standard_layout_v<JobControl>);
static_assert(offsetof(JobControl, stop_mono_ns) == 8);
static_assert(offsetof(JobControl, launcher_heartbeat_ns) == 16);
static_assert(offsetof(JobControl, nccl_id_state) == 24);
static_assert(offsetof(JobControl, nccl_id) == 64);
static_assert(sizeof(JobControl) == 512);

struct alignas(64) ProcessRow {             // 256 bytes; rows_offset + i * 256
  Role role;                                // immutable once ready
  std::uint32_t index;                      // learner rank or actor index; immutable once ready
  std::atomic<std::int32_t> pid;            // launcher at spawn (and the process at attach); 0 = none
  std::atomic<std::uint32_t> state;         // ProcessState (see the contract for who writes which)
  std::atomic<std::uint32_t> restarts;      // launcher: how many times this row was respawned
  std::atomic<std::int32_t> exit_status;    // launcher at reap: exit code, or 128 + signal; -1 = none
  std::atomic<std::uint64_t> spawned_ns;    // launcher, monotonic
  std::atomic<std::uint64_t> heartbeat_ns;  // process, monotonic (launcher initialises it at spawn)
  std::atomic<std::uint64_t> version_seen;  // process: last weight version it picked up
  std::uint64_t reserved[2];
  std::atomic<std::uint64_t> metrics_seq;   // byte 64: seqlock, odd while the record is being written
  std::atomic<std::uint64_t> metrics[kMetricWords];  // byte 72: ProcessMetrics, word by word
};
static_assert(std::is_standard_layout_v<ProcessRow>);
static_assert(offsetof(ProcessRow, pid) == 8);
static_assert(offsetof(ProcessRow, exit_status) == 20);
static_assert(offsetof(ProcessRow, heartbeat_ns) == 32);
static_assert(offsetof(ProcessRow, version_seen) == 40);
static_assert(offsetof(ProcessRow, metrics_seq) == 64);
static_assert(offsetof(ProcessRow, metrics) == 72);
static_assert(sizeof(ProcessRow) == 256);
static_assert(std::atomic<std::uint64_t>::is_always_lock_free && std::atomic<std::uint32_t>::is_always_lock_free &&
              std::atomic<std::int32_t>::is_always_lock_free);
static_assert(sizeof(std::atomic<std::uint64_t>) == 8 && sizeof(std::atomic<std::uint32_t>) == 4);

// A consistent copy of a row, for display.
struct ProcessSnapshot {
  Role role{};
  std::uint32_t index = 0;
  std::int32_t pid = 0;
  ProcessState state{};
  std::uint32_t restarts = 0;
  std::int32_t exit_status = -1;
  std::uint64_t spawned_ns = 0;
  std::uint64_t heartbeat_ns = 0;
  std::uint64_t version_seen = 0;
  std::optional<ProcessMetrics> metrics;    // none: no record yet, or its writer died mid-record
  std::string name() const;                 // "learner.0", "actor.3"
};

// The block itself: the launcher creates it, `tandem status` attaches read-only, ControlClient
// attaches read-write. Row accessors are for the roles named in the contract above.
class ControlBlock {
 public:
  struct Spec {
    std::string job;                        // job id (segment /tandem.<job>.ctl)
    std::uint32_t learners = 1;
    std::uint32_t actors = 0;
    std::string run_dir;
  };
  // Launcher: creates and marks ready (rows empty, stop clear). The segment is removed when the
  // handle is destroyed (every exit path of the launcher).
  static ControlBlock create(const Spec& spec);
  static ControlBlock attach(std::string_view job, Segment::Access access);

  ControlBlock() = default;
  ControlBlock(ControlBlock&&) noexcept = default;
  ControlBlock& operator=(ControlBlock&&) noexcept = default;

  const ControlDescriptor& descriptor() const { return segment_.descriptor_as<ControlDescriptor>(); }
  std::string job() const { return descriptor().job; }
  std::uint32_t row_count() const { return descriptor().row_count; }
  std::uint32_t row_of(Role role, std::uint32_t index) const;   // throws UserError when out of range
  ProcessRow& row(std::uint32_t row) const;
  JobControl& job_control() const;
  const Segment& segment() const { return segment_; }

  // stop request (launcher writes, anyone reads)
  void request_stop(StopReason reason) const;
  bool stop_requested() const;
  StopReason stop_reason() const;

  // Launcher, row lifecycle: begin_spawn before fork (resets the row for a new incarnation: state
  // starting, heartbeat = now, metrics cleared), set_pid after fork, end_process after reaping.
  void begin_spawn(std::uint32_t row, std::uint32_t restarts) const;
  void set_pid(std::uint32_t row, std::int32_t pid) const;
  void end_process(std::uint32_t row, ProcessState state, std::int32_t exit_status) const;
  void set_state(std::uint32_t row, ProcessState state) const;

  // Readers (launcher, `tandem status`).
  ProcessSnapshot snapshot(std::uint32_t row) const;
  std::optional<ProcessMetrics> read_metrics(std::uint32_t row) const;

  // Writer of a row's metrics (its process; one thread at a time).
  void write_metrics(std::uint32_t row, const ProcessMetrics& metrics) const;

 private:
  explicit ControlBlock(Segment segment) : segment_(std::move(segment)) {}
  Segment segment_;
};

// The child's side. A process started by `tandem run` finds its job, role and index in the
// environment (TANDEM_JOB, TANDEM_ROLE = learner|actor, TANDEM_INDEX) and attaches to its own row.
class ControlClient {
 public:
  // nullopt when TANDEM_JOB is unset (the program runs on its own, e.g. under torchrun or by hand);
  // a UserError naming the variable when the variables are malformed or the block is missing.
  // Also makes stdout line-buffered, so the launcher prefixes and shows lines as they are written.
  static std::optional<ControlClient> from_env();
  static ControlClient attach(std::string_view job, Role role, std::uint32_t index);

  ControlClient(ControlClient&& other) noexcept;
  ControlClient& operator=(ControlClient&&) = delete;
  ~ControlClient() = default;

  Role role() const { return role_; }
  std::uint32_t index() const { return index_; }
  std::string name() const;                     // "learner.0"
  std::string job() const { return block_.job(); }
  std::string run_dir() const { return block_.descriptor().run_dir; }
  std::uint32_t restarts() const;               // how many times the launcher respawned this row
  const ControlBlock& block() const { return block_; }

  void heartbeat() const;                       // any thread; call at least every heartbeat timeout
  void set_state(ProcessState state) const;     // running or stopping
  void saw_version(std::uint64_t version) const;
  void report(ProcessMetrics metrics);          // sets updated_ns; any thread (serialised)
  bool should_stop() const;                     // the launcher's stop request, or a local request_stop()
  void request_stop_locally() { local_stop_.store(true, std::memory_order_relaxed); }

  // Single-node NCCL rendezvous: rank 0 publishes its ncclUniqueId once; the others wait for it.
  void publish_nccl_id(std::span<const std::byte> id) const;
  // nullopt when the timeout passes or a stop is requested first.
  std::optional<std::array<std::byte, kNcclIdBytes>> wait_nccl_id(std::chrono::milliseconds timeout) const;

 private:
  ControlClient(ControlBlock block, Role role, std::uint32_t index, std::uint32_t row);
  ControlBlock block_;
  Role role_;
  std::uint32_t index_;
  std::uint32_t row_;
  std::mutex report_mutex_;
  std::atomic<bool> local_stop_{false};
};

// Beats a client's heartbeat every `period` from its own thread until destroyed (destruction wakes
// and joins it). With stall_limit > 0 it beats only while tick() was called within stall_limit, so a
// main loop that hangs stops the heartbeat and the launcher notices.
class HeartbeatThread {
 public:
  HeartbeatThread(const ControlClient& client, std::chrono::milliseconds period,
                  std::chrono::milliseconds stall_limit = std::chrono::milliseconds(0));
  ~HeartbeatThread();
  HeartbeatThread(const HeartbeatThread&) = delete;
  HeartbeatThread& operator=(const HeartbeatThread&) = delete;

  void tick() { last_tick_ns_.store(monotonic_ns(), std::memory_order_relaxed); }  // any thread

 private:
  void loop();
  const ControlClient& client_;
  std::chrono::milliseconds period_;
  std::chrono::milliseconds stall_limit_;
  std::atomic<std::uint64_t> last_tick_ns_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool quit_ = false;
  std::thread thread_;
};

}  // namespace tandem::shm
