// The deadlines of a job's stop: once it begins, the processes have a grace period to exit on their
// own (they see the control block's stop flag), then get SIGTERM, then kill_timeout later SIGKILL.
// A later reason to stop (a failure, another signal) can only bring the deadlines closer.
// The supervisor sends the signals; this only says when. Times are monotonic_ns() values.
// Threads: the launcher's one thread.
#pragma once

#include <cstdint>

namespace tandem::run {

class StopSequence {
 public:
  explicit StopSequence(double kill_timeout_s) : kill_timeout_s_(kill_timeout_s) {}

  bool stopping() const { return stopping_; }
  // Starts the sequence (true) or, when it has started, brings its deadlines closer (false).
  bool begin(std::uint64_t now_ns, double grace_s);
  void terminate_now(std::uint64_t now_ns);  // SIGTERM is due now, SIGKILL kill_timeout later at the latest
  void kill_now(std::uint64_t now_ns);       // SIGKILL is due now

  struct Due {
    bool term = false;
    bool kill = false;
  };
  Due due(std::uint64_t now_ns);  // each signal becomes due once

 private:
  double kill_timeout_s_;
  bool stopping_ = false;
  std::uint64_t term_at_ns_ = 0, kill_at_ns_ = 0;
  bool term_sent_ = false, kill_sent_ = false;
};

std::uint64_t ns_from_s(double s);

}  // namespace tandem::run
