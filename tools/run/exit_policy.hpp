// What the supervisor does when one of its processes exits or stops showing signs of life: restart
// it, let it be, kill it as hung, or fail the job. A pure function of what happened, the process's
// history, the job's phase and the [run] limits, so that every rule below is tested as a table
// (tests/run_policy_test.cpp) without starting a process.
//
// The rules (also in `tandem run --help` and docs/ARCHITECTURE.md, "The launcher"):
//  - An actor that exits non-zero, is killed, or hangs while the job runs is restarted after an
//    exponential backoff (restart_backoff_s doubling per crash in a row, capped at
//    restart_backoff_max_s; the streak resets once it ran longer than max(60 s, 2 x the cap)), up to
//    max_restarts times; one more crash fails the job. So does an actor that fails the same way
//    (same exit status, same last line) kSameFailureLimit times in a row: restarting it again would
//    only repeat the failure. An actor that exits 0 on its own is done.
//  - A learner that exits non-zero, is killed, or hangs fails the job, in every phase. A learner
//    that exits 0 while the job runs has finished its work.
//  - While the job finishes (every learner exited 0), actors still owe their duty: an evaluator must
//    evaluate the final version. One that crashes then, or whose restart was pending, is restarted
//    by the same rules (the learner leaves its final weights for it); one that needed SIGTERM fails
//    the job. Once every process exited, unmet_duty() names each actor that never reported the
//    final version, and the job fails saying so: success never depends on when an actor died.
//  - While the job stops for a signal or a failure, exits are final: a failing one fails the job
//    unless it already failed. One exception: a signal's stop that comes while a process is still
//    starting (it never reported itself running) cuts its start short, so however it then exits on
//    its own it was stopped, not failed; one the launcher had to SIGTERM or SIGKILL still fails it.
//  - A process that has not reported itself running within start_timeout_s of its start, or whose
//    heartbeat is older than heartbeat_timeout_s, is killed as hung (0 turns either check off);
//    its exit then comes back as an Exit carrying why.
// Threads: any; it keeps no state.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "shm/control_block.hpp"
#include "tools/run/child_process.hpp"

namespace tandem::run {

// finishing: every learner finished and the actors do their last work; stopping: a signal asked the
// job to stop; failed: stopping because something failed.
enum class JobPhase { running, finishing, stopping, failed };

// Failing this many times in a row the same way (exit status and last line) fails the job.
inline constexpr std::uint32_t kSameFailureLimit = 3;

struct RestartLimits {
  std::uint32_t max_restarts = 0;
  double backoff_s = 0;            // run.restart_backoff_s
  double backoff_max_s = 0;        // run.restart_backoff_max_s
  double heartbeat_timeout_s = 0;  // 0 = off
  double start_timeout_s = 0;      // 0 = off
};

// One row of the job across its restarts, as far as the policy cares.
struct ProcessHistory {
  shm::Role role{};
  std::uint32_t restarts = 0;        // restarts so far
  std::uint32_t crashes_in_row = 0;  // crashes without a long enough run between them
  std::chrono::nanoseconds up{0};    // time since its latest start
  std::string last_failure;          // failure_signature() of its previous failure ("" = none)
  std::uint32_t same_failures = 0;   // failures in a row with that signature
};

// The process was reaped.
struct Exited {
  ExitStatus status;
  std::string hung;                     // why the launcher killed it as hung, when it did
  bool signalled_for_stop = false;      // the launcher sent it SIGTERM/SIGKILL because it did not stop
  std::string last_line;                // the last line it printed ("" = none)
  bool stopped_while_starting = false;  // it exited after the stop began, never having reported itself running
};

// A periodic look at a live process's row in the control block.
struct Watched {
  bool reported_running = false;  // it left the `starting` state
  std::chrono::nanoseconds since_heartbeat{0};
  bool already_killed = false;  // killed as hung, or signalled for the stop: wait for its exit
};

using ProcessEvent = std::variant<Exited, Watched>;

struct Decision {
  enum class Action {
    ignore,     // nothing to do
    done,       // exited for good, and that is fine; `note`, when set, is worth telling the user
    finished,   // a learner finished its work: when every learner has, the job stops as finished
    restart,    // start it again after `delay`; `reason` says what happened to it
    fail_job,   // the job fails; `reason` says what this process did
    kill_hung,  // kill it; `reason` says why
  };
  Action action = Action::ignore;
  std::string reason;
  std::string note;
  std::chrono::nanoseconds delay{0};  // restart
  std::uint32_t crashes_in_row = 0;   // restart: the streak, this crash included
  std::string failure;                // restart: this failure's signature, and how many in a row had it
  std::uint32_t same_failures = 0;
};

Decision decide(const ProcessEvent& event, const ProcessHistory& process, JobPhase phase, const RestartLimits& limits);

// What makes two failures "the same way": how it ended and the last line it printed.
std::string failure_signature(const Exited& e);

// An actor's duty at the end of a job whose learners finished: to have reported (evaluated) the
// learners' final published version.
struct Duty {
  std::string name;                    // "actor.1"
  std::uint64_t reported_version = 0;  // the newest version it reported, over all its incarnations
  std::string last_exit;               // how its last incarnation ended ("exited with status 0")
};
// nullopt when every actor reported `final_version`; else one line naming each that did not.
std::optional<std::string> unmet_duty(const std::vector<Duty>& actors, std::uint64_t final_version);

std::string format_seconds(double s);  // "5", "0.5": as a user would write it in the config

}  // namespace tandem::run
