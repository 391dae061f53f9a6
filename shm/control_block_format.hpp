// The control block's format `/tandem.<job>.ctl`: the bytes the launcher (`tandem run`) and every
// process of a job share, as a Python reader sees them (docs/FORMAT.md, "Control block"). Layout: the
// segment header, a ControlDescriptor at byte 64, then the payload: a JobControl record (512 bytes)
// followed by one 512-byte ProcessRow per process: learner ranks first (row r = rank r), then actors
// (row learners + i = actor i). The launcher's side is control_block.hpp, a process's own side
// control_client.hpp.
//
// Who writes what (everything else is read-only for everyone):
//  - The launcher writes the descriptor and the rows' identity (role, index, group, no_heartbeat)
//    before mark_ready(); they never change afterwards. Rows of one program group are contiguous. It writes JobControl.stop (the stop request) and its own heartbeat.
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
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string_view>
#include <type_traits>

#include "shm/segment.hpp"

namespace tandem::shm {

inline constexpr std::uint32_t kControlLayoutVersion = 2;
inline constexpr std::size_t kNcclIdBytes = 128;  // sizeof(ncclUniqueId)
inline constexpr std::uint32_t kMaxLearners = 256;
inline constexpr std::uint32_t kMaxActors = 4096;
inline constexpr std::size_t kGroupNameBytes = 15;  // a program group's name, at most 15 bytes

enum class Role : std::uint32_t { learner = 1, actor = 2 };
std::string_view role_name(Role role);  // "learner", "actor"
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
// Starting, running or stopping: a process that is (or is about to be) there.
constexpr bool is_alive(ProcessState s) {
  return s == ProcessState::starting || s == ProcessState::running || s == ProcessState::stopping;
}

enum class StopReason : std::uint32_t { none = 0, finished = 1, interrupted = 2, failure = 3 };
std::string_view stop_reason_name(StopReason reason);

// One record of a process's metrics. Meaning by role:
//   learner:  step = optimizer steps done, version = latest weight version published, samples = samples
//             trained on, epoch, samples_per_s, loss = recent training loss, accuracy = recent training
//             accuracy, seconds = mean step time, lr = current learning rate.
//   actor (evaluator): step = evaluations done, version = weight version evaluated last, samples = test
//             samples in that evaluation, samples_per_s = its throughput, loss/accuracy = test loss and
//             accuracy, seconds = wall time of that evaluation.
//   RL fields (NaN or 0 elsewhere). Learner: env_steps = environment steps consumed, env_steps_per_s,
//             episode_return / episode_length = mean over the last 100 finished training episodes,
//             policy_lag_* = learner version minus behaviour version over the slots of the last update.
//             Rollout actor: env_steps produced, env_steps_per_s, episode_return / length of its recent
//             episodes, policy_lag_avg = latest slab version minus the version it acted with,
//             ring_full_waits = begin_write calls that found its ring full. RL evaluator: episode_return
//             / length = mean of its last evaluation (greedy policy).
//   Data-parallel fields (learner ranks): allreduce_s = mean time from a step's first bucket all-reduce
//             start to the last one's end, exposed_comm_s = mean time the step waited for communication
//             after backward ended (not overlapped).
//   Where the time went, shares of the wall time since the last report (RL): rollout actor:
//             env_share stepping its envs, compute_share running its policy, wait_share waiting on a
//             full ring; RL learner: compute_share in its updates (batch, update, publish), wait_share
//             waiting for slots. The rest (reports, weight loads, gathering) is in none of them.
//   PPO's and V-trace's diagnostics (RL learner, the last update; docs/RL.md says how to read them):
//             policy_loss, value_loss, entropy (means over its minibatches), approx_kl = mean of
//             (r - 1) - log r over its samples (r the ratio to the behaviour policy), clip_frac = share of
//             samples with |r - 1| > rl.clip_coef, explained_var = 1 - Var(targets - values) / Var(targets)
//             of the values before the update, adv_std = the advantages' std before normalisation,
//             log_std = the Gaussian policy's mean log-std, return_std = the running std the value
//             targets are divided by (rl.norm_value), reward_std = the running std of the discounted
//             return rewards are divided by (rl.norm_reward).
// A double that was not measured is NaN; `updated_ns` is set by report() (0 = no record yet). The
// fields by name, for every path that names them: shm/metric_fields.hpp.
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
  std::uint64_t env_steps = 0;  // byte 80
  double env_steps_per_s = kNaN;
  double episode_return = kNaN;
  double episode_length = kNaN;
  double policy_lag_min = kNaN;  // byte 112
  double policy_lag_avg = kNaN;
  double policy_lag_max = kNaN;
  std::uint64_t ring_full_waits = 0;
  double allreduce_s = kNaN;  // byte 144
  double exposed_comm_s = kNaN;
  double env_share = kNaN;  // byte 160
  double compute_share = kNaN;
  double wait_share = kNaN;
  double policy_loss = kNaN;  // byte 184
  double value_loss = kNaN;
  double entropy = kNaN;
  double approx_kl = kNaN;
  double clip_frac = kNaN;
  double explained_var = kNaN;  // byte 224
  double adv_std = kNaN;
  double log_std = kNaN;
  double return_std = kNaN;
  double reward_std = kNaN;
};
inline constexpr std::size_t kMetricWords = 33;
static_assert(std::is_trivially_copyable_v<ProcessMetrics> && std::is_standard_layout_v<ProcessMetrics>);
static_assert(sizeof(ProcessMetrics) == kMetricWords * 8);
static_assert(offsetof(ProcessMetrics, samples_per_s) == 40 && offsetof(ProcessMetrics, lr) == 72);
static_assert(offsetof(ProcessMetrics, env_steps) == 80 && offsetof(ProcessMetrics, policy_lag_min) == 112);
static_assert(offsetof(ProcessMetrics, allreduce_s) == 144 && offsetof(ProcessMetrics, env_share) == 160);
static_assert(offsetof(ProcessMetrics, policy_loss) == 184 && offsetof(ProcessMetrics, explained_var) == 224);

struct ControlDescriptor {      // at segment byte 64; immutable once ready
  std::uint32_t row_count;      // learner_count + actor_count
  std::uint32_t learner_count;  // WORLD_SIZE
  std::uint32_t actor_count;
  std::uint32_t row_bytes;    // sizeof(ProcessRow) = 512
  std::uint64_t job_offset;   // of JobControl, from the payload start (0)
  std::uint64_t rows_offset;  // of row 0, from the payload start (512)
  std::int32_t launcher_pid;
  std::uint32_t reserved0;
  std::uint64_t started_unix_ns;  // when the launcher created the job (wall clock)
  std::uint64_t started_mono_ns;  // the same instant, CLOCK_MONOTONIC
  char job[72];                   // job id, NUL-terminated, e.g. "fmnist-3f9a"
  char run_dir[1024];             // absolute run directory, NUL-terminated
};
static_assert(std::is_standard_layout_v<ControlDescriptor> && std::is_trivially_copyable_v<ControlDescriptor>);
static_assert(offsetof(ControlDescriptor, rows_offset) == 24);
static_assert(offsetof(ControlDescriptor, launcher_pid) == 32);
static_assert(offsetof(ControlDescriptor, started_unix_ns) == 40);
static_assert(offsetof(ControlDescriptor, job) == 56);
static_assert(offsetof(ControlDescriptor, run_dir) == 128);
static_assert(sizeof(ControlDescriptor) == 1152 && sizeof(ControlDescriptor) <= kDescriptorBytes);

enum class NcclIdState : std::uint32_t { empty = 0, writing = 1, published = 2 };

struct alignas(64) JobControl {                      // payload byte 0, 512 bytes
  std::atomic<std::uint32_t> stop;                   // 0 = run, 1 = stop requested; launcher, release/acquire
  std::atomic<std::uint32_t> stop_reason;            // StopReason; written before `stop`
  std::atomic<std::uint64_t> stop_mono_ns;           // when the stop was requested; written before `stop`
  std::atomic<std::uint64_t> launcher_heartbeat_ns;  // launcher, relaxed
  std::atomic<std::uint32_t> nccl_id_state;          // NcclIdState; rank 0, release/acquire
  std::uint32_t reserved0;
  std::uint64_t reserved1[4];
  unsigned char nccl_id[kNcclIdBytes];  // byte 64: ncclUniqueId, valid once nccl_id_state is published
  std::uint64_t reserved2[40];
};
static_assert(std::is_standard_layout_v<JobControl>);
static_assert(offsetof(JobControl, stop_mono_ns) == 8);
static_assert(offsetof(JobControl, launcher_heartbeat_ns) == 16);
static_assert(offsetof(JobControl, nccl_id_state) == 24);
static_assert(offsetof(JobControl, nccl_id) == 64);
static_assert(sizeof(JobControl) == 512);

struct alignas(64) ProcessRow {                      // 512 bytes; rows_offset + i * 512
  Role role;                                         // immutable once ready
  std::uint32_t index;                               // learner rank or actor index; immutable once ready
  std::atomic<std::int32_t> pid;                     // launcher at spawn (and the process at attach); 0 = none
  std::atomic<std::uint32_t> state;                  // ProcessState (see the contract for who writes which)
  std::atomic<std::uint32_t> restarts;               // launcher: how many times this row was respawned
  std::atomic<std::int32_t> exit_status;             // launcher at reap: exit code, or 128 + signal; -1 = none
  std::atomic<std::uint64_t> spawned_ns;             // launcher, monotonic
  std::atomic<std::uint64_t> heartbeat_ns;           // process, monotonic (launcher initialises it at spawn)
  std::atomic<std::uint64_t> version_seen;           // process: last weight version it picked up
  char group[kGroupNameBytes];                       // its program group (run.group), NUL-padded; "" = its role's name
  std::uint8_t no_heartbeat;                         // 1: its program does not join the block; exit status only
  std::atomic<std::uint64_t> metrics_seq;            // byte 64: seqlock, odd while the record is being written
  std::atomic<std::uint64_t> metrics[kMetricWords];  // byte 72: ProcessMetrics, word by word
  std::uint8_t reserved[176];                        // byte 336: zero; room for more metrics
};
static_assert(std::is_standard_layout_v<ProcessRow>);
static_assert(offsetof(ProcessRow, pid) == 8);
static_assert(offsetof(ProcessRow, exit_status) == 20);
static_assert(offsetof(ProcessRow, heartbeat_ns) == 32);
static_assert(offsetof(ProcessRow, version_seen) == 40);
static_assert(offsetof(ProcessRow, group) == 48 && offsetof(ProcessRow, no_heartbeat) == 63);
static_assert(offsetof(ProcessRow, metrics_seq) == 64);
static_assert(offsetof(ProcessRow, metrics) == 72);
static_assert(sizeof(ProcessRow) == 512);
static_assert(std::atomic<std::uint64_t>::is_always_lock_free && std::atomic<std::uint32_t>::is_always_lock_free &&
              std::atomic<std::int32_t>::is_always_lock_free);
static_assert(sizeof(std::atomic<std::uint64_t>) == 8 && sizeof(std::atomic<std::uint32_t>) == 4);

}  // namespace tandem::shm
