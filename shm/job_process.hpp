// JobProcess: what tandem-learner and tandem-actor set up the same way at start. Under `tandem run`
// (TANDEM_* in the environment) it attaches the job's control block, line-buffers stdout (the
// launcher reads it through a pipe and shows each line as it comes), names log lines after the
// process ("learner.0") and beats the heartbeat from a thread (heartbeat_thread.hpp) that stops
// beating once the main loop has neither called tick() for stall_limit (kStallLimit: 120 s) nor holds
// a busy() scope, so the launcher kills a main loop that hangs but never a long checkpoint. Started
// by hand, it is job "local" in run dir "." with no control block and no heartbeat.
//
// Threads: owned by main's thread, which constructs it after catch_stop_signals()
// (common/program.hpp). tick() and stop_requested() may be called from any thread.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

#include "shm/control_client.hpp"
#include "shm/heartbeat_thread.hpp"

namespace tandem::shm {

class JobProcess {
 public:
  static constexpr std::chrono::milliseconds kStallLimit{120'000};

  // role_by_hand: the log role when no launcher started this process ("learner", "actor");
  // stall_limit: kStallLimit, or a test's shorter one.
  explicit JobProcess(std::string_view role_by_hand, std::chrono::milliseconds stall_limit = kStallLimit);
  JobProcess(const JobProcess&) = delete;
  JobProcess& operator=(const JobProcess&) = delete;

  ControlClient* client() { return client_ ? &*client_ : nullptr; }  // null when started by hand
  HeartbeatThread* heartbeat() { return heartbeat_ ? &*heartbeat_ : nullptr; }
  const std::string& job() const { return job_; }
  const std::string& run_dir() const { return run_dir_; }

  void tick() {
    if (heartbeat_) heartbeat_->tick();
  }
  // Around one call that is long and cannot tick (a checkpoint write): not a hang, however long.
  [[nodiscard]] HeartbeatThread::Busy busy() { return HeartbeatThread::Busy(heartbeat()); }
  // A stop signal (SIGINT/SIGTERM) arrived, or the launcher set the job's stop flag.
  bool stop_requested() const;

 private:
  std::optional<ControlClient> client_;
  std::string job_, run_dir_;
  std::optional<HeartbeatThread> heartbeat_;  // last: stopped before the client goes
};

}  // namespace tandem::shm
