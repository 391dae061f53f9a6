// HeartbeatThread: beats a ControlClient's heartbeat from a thread of its own, so a process whose
// main loop blocks for long (a checkpoint, an evaluation) is not taken for hung. Owned by a main():
// the thread is this object's std::jthread, started by the constructor and stopped and joined by the
// destructor, which wakes it at once (no waiting out a period).
//
// Contract
//  * Every `period`, the thread calls client.heartbeat() if beats_at(now) holds. With stall_limit 0 it
//    always does. With stall_limit > 0 it beats only while tick() was called within stall_limit, so a
//    main loop that hangs stops the heartbeat and the launcher notices.
//  * tick() may be called from any thread: it is one relaxed store of monotonic_ns() (common/clock.hpp);
//    the thread reads it relaxed. Nothing else is shared.
//  * The client outlives the HeartbeatThread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <stop_token>
#include <thread>

#include "common/clock.hpp"
#include "shm/control_client.hpp"

namespace tandem::shm {

class HeartbeatThread {
 public:
  HeartbeatThread(const ControlClient& client, std::chrono::milliseconds period,
                  std::chrono::milliseconds stall_limit = std::chrono::milliseconds(0));
  HeartbeatThread(const HeartbeatThread&) = delete;
  HeartbeatThread& operator=(const HeartbeatThread&) = delete;

  void tick() { last_tick_ns_.store(monotonic_ns(), std::memory_order_relaxed); }  // any thread
  // Whether the thread beats when it wakes at `now_ns` (CLOCK_MONOTONIC): pure, so tests drive time.
  [[nodiscard]] bool beats_at(std::uint64_t now_ns) const;

 private:
  void run(const std::stop_token& stop);
  const ControlClient& client_;
  const std::chrono::milliseconds period_;
  const std::uint64_t stall_limit_ns_;
  std::atomic<std::uint64_t> last_tick_ns_;
  std::mutex mutex_;
  std::condition_variable_any wake_;
  std::jthread thread_;  // last: starts after, and is joined before, everything it reads
};

}  // namespace tandem::shm
