// The launcher's supervisor: starts a job's processes, watches them, and ends the job.
//
// What it does about exits and hangs is exit_policy.hpp's decide(); this carries it out:
//  - Learner ranks and actors are spawned at start; their output lines are shown with their name.
//  - Crashed or hung actors are restarted with backoff up to run.max_restarts; a learner's failure,
//    an actor past its restarts, or one failing the same way kSameFailureLimit times in a row, fails
//    the job. When every learner has exited 0 the job is finishing: the actors are asked to stop
//    after their last work (the final version); a crashed one is still restarted to do it.
//  - Stopping (finished, failed, or SIGINT/SIGTERM/SIGHUP) sets the control block's stop flag; the
//    processes get run.stop_timeout_s (run.kill_timeout_s after a failure) to exit, then SIGTERM,
//    then after run.kill_timeout_s SIGKILL. A second signal sends SIGTERM at once, a third SIGKILL.
//  - The job succeeded when every learner exited 0 before any stop request, every process exited 0
//    after it, and every actor reported the learners' final version (else the job fails naming each
//    actor that did not, whenever it died). It was interrupted (exit 128 + signal) when a signal stopped it
//    and no process failed: each exited 0, or was still starting when the stop came and ended on its
//    own (exit_policy.hpp), at whatever moment of start-up the signal came. Anything else failed, naming
//    the first process that failed and its last lines.
// Threads: one, running the io_context; children are reaped on SIGCHLD and on a 100 ms tick.
#pragma once

#include <memory>
#include <string>

#include "tools/run/child_spec.hpp"
#include "tools/run/console.hpp"
#include "tools/run/job_config.hpp"
#include "tools/run/job_view.hpp"

namespace tandem::run {

struct JobResult {
  enum class Outcome { succeeded, interrupted, failed };
  Outcome outcome = Outcome::failed;
  int signal = 0;       // the signal that interrupted the job
  std::string failure;  // what failed, and its last lines
  JobSummary summary;   // the control block's last state
  double elapsed_s = 0;
};

class Supervisor {
 public:
  using Job = run::Job;
  // Creates the job's segments and binds the metrics endpoint; nothing is spawned until run().
  Supervisor(const JobConfig& config, Job job, Console& console);
  // Kills (SIGKILL) and reaps every child still running, then removes the job's segments.
  ~Supervisor();
  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;

  JobResult run();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tandem::run
