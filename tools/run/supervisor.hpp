// The launcher's supervisor: starts a job's processes, watches them, and ends the job.
//
// Policy (docs in `tandem run --help` and DESIGN.md, "Processes"):
//  - Learner ranks and actors are spawned at start; their output lines are shown with their name.
//  - An actor that exits non-zero, is killed, or hangs (no heartbeat within run.heartbeat_timeout_s)
//    is restarted after an exponential backoff, up to run.max_restarts times; one more crash fails
//    the job. An actor that exits 0 on its own is done and not restarted.
//  - A learner that exits non-zero, is killed, or hangs fails the job. When every learner has exited
//    0 the job is finished: the actors are asked to stop.
//  - Stopping (finished, failed, or SIGINT/SIGTERM/SIGHUP) sets the control block's stop flag; the
//    processes get run.stop_timeout_s (run.kill_timeout_s after a failure) to exit, then SIGTERM,
//    then after run.kill_timeout_s SIGKILL. A second signal sends SIGTERM at once, a third SIGKILL.
//  - The job succeeded when every learner exited 0 before any stop request and every process exited
//    0 after it. It was interrupted (exit 128 + signal) when a signal stopped it and every process
//    still exited 0. Anything else failed, naming the first process that failed and its last lines.
// Threads: one, running the io_context; children are reaped on SIGCHLD and on a 100 ms tick.
#pragma once

#include <filesystem>
#include <memory>
#include <span>
#include <string>

#include "tools/run/console.hpp"
#include "tools/run/job_config.hpp"
#include "tools/run/job_view.hpp"

namespace tandem::run {

struct JobResult {
  enum class Outcome { succeeded, interrupted, failed };
  Outcome outcome = Outcome::failed;
  int signal = 0;           // the signal that interrupted the job
  std::string failure;      // what failed, and its last lines
  JobSummary summary;       // the control block's last state
  double elapsed_s = 0;
};

class Supervisor {
 public:
  struct Job {
    std::string id;                       // e.g. fmnist-3f9a
    std::filesystem::path run_dir;        // absolute, exists
    std::filesystem::path child_config;   // run_dir/job.toml
    std::uint16_t master_port = 0;
  };
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

// Everything `tandem run` does: load and check the config, make the run directory, supervise the
// job, remove its segments, print the outcome. Returns the exit code: 0 succeeded, 128 + signal
// interrupted cleanly, 1 failed.
int run_job(const std::filesystem::path& config_file, std::span<const std::string> overrides);

}  // namespace tandem::run
