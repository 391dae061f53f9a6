// JobProcess: what tandem-learner and tandem-actor set up the same way at start. Under `tandem run`
// (TANDEM_* in the environment) it attaches the job's control block, line-buffers stdout (the
// launcher reads it through a pipe and shows each line as it comes), names log lines after the
// process ("learner.0") and beats the heartbeat from a thread that stops beating once the main loop
// has not called tick() for 120 s, so the launcher can tell a hung process from a busy one. Started
// by hand, it is job "local" in run dir "." with no control block and no heartbeat.
//
// Threads: owned by main's thread, which constructs it after catch_stop_signals()
// (common/program.hpp). tick() and stop_requested() may be called from any thread.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "shm/control_client.hpp"
#include "shm/heartbeat_thread.hpp"

namespace tandem::shm {

class JobProcess {
 public:
  // role_by_hand: the log role when no launcher started this process ("learner", "actor").
  explicit JobProcess(std::string_view role_by_hand);
  JobProcess(const JobProcess&) = delete;
  JobProcess& operator=(const JobProcess&) = delete;

  ControlClient* client() { return client_ ? &*client_ : nullptr; }  // null when started by hand
  HeartbeatThread* heartbeat() { return heartbeat_ ? &*heartbeat_ : nullptr; }
  const std::string& job() const { return job_; }
  const std::string& run_dir() const { return run_dir_; }

  void tick() {
    if (heartbeat_) heartbeat_->tick();
  }
  // A stop signal (SIGINT/SIGTERM) arrived, or the launcher set the job's stop flag.
  bool stop_requested() const;

 private:
  std::optional<ControlClient> client_;
  std::string job_, run_dir_;
  std::optional<HeartbeatThread> heartbeat_;  // last: stopped before the client goes
};

}  // namespace tandem::shm
