// The control block's launcher side and shared reader: ControlBlock creates `/tandem.<job>.ctl`
// (the launcher), attaches to it (`tandem status`, the dashboard, and ControlClient underneath), and
// reads and writes the rows by the rules of the format's contract (control_block_format.hpp: who
// writes which field, with which memory order). A process's own side is control_client.hpp.
//
// Threads: a ControlBlock is a move-only handle owned by one thread; the methods are lock-free
// loads and stores on the shared block, so handles in several threads or processes may use the same
// block concurrently as long as each field keeps its single writer.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "shm/control_block_format.hpp"
#include "shm/segment.hpp"

namespace tandem::shm {

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
  std::optional<ProcessMetrics> metrics;  // none: no record yet, or its writer died mid-record
  std::string group;                      // its program group; "" in a block written before groups
  std::uint32_t group_index = 0;          // its place in the group (= index for the role's own group)
  bool heartbeat = true;                  // false: supervised by exit status only (no_heartbeat)
  std::string name() const;               // "learner.0", "actor.3", "logger.0"
};

// A row's program group as the launcher labels it at create (control_block_format.hpp: group).
struct RowGroup {
  std::string name;  // at most kGroupNameBytes bytes; "" = the role's name
  bool heartbeat = true;
};

// The block itself: the launcher creates it, `tandem status` attaches read-only, ControlClient
// attaches read-write. Row accessors are for the roles named in control_block_format.hpp.
class ControlBlock {
 public:
  struct Spec {
    std::string job;  // job id (segment /tandem.<job>.ctl)
    std::uint32_t learners = 1;
    std::uint32_t actors = 0;
    std::string run_dir;
    std::vector<RowGroup> groups{};  // one per row (learners, then actors), or empty: every row its role's
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
  std::uint32_t row_of(Role role, std::uint32_t index) const;  // throws UserError when out of range
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

}  // namespace tandem::shm
