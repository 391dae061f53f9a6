// The supervisor's insides, shared by its files (not part of the library's interface):
//   supervisor.cpp        construction, spawning, the 100 ms tick, run()
//   supervisor_exits.cpp  reaping, draining a dead child's pipes, acting on the policy's decision
//   supervisor_stop.cpp   the stop: request, SIGTERM/SIGKILL escalation, signals to the launcher
//   supervisor_watch.cpp  hang checks (start timeout, heartbeat timeout)
// What to do about an exit or a hang is decided in exit_policy.hpp; these files carry it out.
// Threads: everything runs on the one thread that runs `io`.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tools/run/child_output.hpp"
#include "tools/run/child_process.hpp"
#include "tools/run/job_segments.hpp"
#include "tools/run/dashboard_routes.hpp"
#include "tools/run/metrics_log.hpp"
#include "tools/run/exit_policy.hpp"
#include "tools/run/stop_sequence.hpp"
#include "tools/run/supervisor.hpp"

namespace tandem::run {

struct Supervisor::Impl {
  // One row of the job: a learner rank or an actor, across its restarts.
  struct Slot {
    Slot(Impl& impl, const ProgramGroup& group, std::uint32_t group_index, std::uint32_t row);
    const ProgramGroup& group;
    std::uint32_t group_index;  // its place in the group
    shm::Role role;
    std::uint32_t index;  // the role's index: group.first_index + group_index
    std::uint32_t row;
    std::string name;
    ChildProcess child;
    pid_t last_pid = 0;
    ChildOutput output;
    std::optional<ExitStatus> pending_exit;  // reaped, waiting for its pipes to drain
    bool exited_while_stopping = false;      // the job was stopping when it was reaped
    std::uint64_t exit_deadline_ns = 0;
    std::uint32_t restarts = 0;
    std::uint32_t crashes_in_row = 0;
    std::string last_failure;            // the policy's failure signature of its latest failure
    std::uint32_t same_failures = 0;     // failures in a row with that signature
    std::uint64_t reported_version = 0;  // newest weight version it reported, over its incarnations
    std::string last_exit;               // how its latest incarnation ended
    std::uint64_t spawned_ns = 0;
    std::string hung;                 // why the launcher killed it, when it did
    bool signalled_for_stop = false;  // the launcher sent it SIGTERM/SIGKILL because it did not stop
    bool asked_by_sigterm = false;    // a program that never joins: SIGTERM was its stop request
    bool done = false;                // exited and will not run again
    boost::asio::steady_timer restart_timer;
  };

  Impl(const JobConfig& config, Job job, Console& console);
  JobResult run();

  // supervisor.cpp
  JobPhase phase() const;
  ProcessHistory history(const Slot& s) const;
  void spawn(Slot& s);
  void tick();
  void finish_if_done();
  void wait_for_signal();
  void wait_for_child_exit();
  std::optional<std::string> unmet_duty_text() const;
  // supervisor_exits.cpp
  void note_reported_version(Slot& s);
  void reap_all();
  void complete_exit_if_drained(Slot& s);
  void drain_deadlines();
  void on_exit(Slot& s, const ExitStatus& status);
  void schedule_restart(Slot& s, const Decision& d);
  void fail_job(Slot& s, const std::string& what, const ExitStatus& status);
  // supervisor_stop.cpp
  void begin_stop(shm::StopReason reason, double grace_s);
  void cancel_pending_restarts();
  void escalate();
  void on_signal(int sig);
  // supervisor_watch.cpp
  void check_heartbeats();

  // ---- members (destroyed in reverse: endpoint, slots (children killed and reaped), segments) ----
  const JobConfig& cfg;
  const RestartLimits limits;
  Job job;
  Console& console;
  std::uint64_t started_ns;
  boost::asio::io_context io;
  boost::asio::signal_set signals;
  boost::asio::signal_set child_exits;
  boost::asio::steady_timer tick_timer;
  JobSegments segments;
  const shm::ControlBlock& control;
  MetricsLog metrics;
  std::vector<std::unique_ptr<Slot>> slots;
  std::optional<MetricsEndpoint> endpoint;

  StopSequence stop;
  shm::StopReason stop_reason = shm::StopReason::none;  // why the stop began (the first reason)
  int signals_received = 0;
  int interrupt_signal = 0;
  std::optional<std::string> failure;
  bool failure_may_be_echo = false;  // it came from a rank's error exit, which a peer's death may have caused
  std::uint64_t next_metrics_ns = 0, next_status_ns = 0;
  bool finished = false;
};

}  // namespace tandem::run
