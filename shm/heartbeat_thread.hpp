// HeartbeatThread: beats a ControlClient's heartbeat from a thread of its own, so a process whose
// main loop is in one long call (a checkpoint) or long work done in pieces (an evaluation) is not
// taken for hung, while one whose main loop stops making progress is. Owned by a main(): the thread
// is this object's std::jthread, started by the constructor and stopped and joined by the
// destructor, which wakes it at once (no waiting out a period).
//
// Contract
//  * Every `period`, the thread calls client.heartbeat() if beats_at(now) holds. With stall_limit 0 it
//    always does. With stall_limit > 0 it beats only while the main loop shows progress: tick() was
//    called within stall_limit, or a Busy scope is alive. So a main loop that hangs stops the
//    heartbeat and the launcher kills it, while one long call known to be long and unable to tick (a
//    checkpoint write) holds a Busy scope and is never taken for a hang. Work that proceeds in pieces
//    (an evaluation's batches and episodes) ticks per piece instead.
//  * tick() may be called from any thread: it is one relaxed store of monotonic_ns() (common/clock.hpp).
//    A Busy scope counts itself in an atomic counter; its end ticks first and then leaves the count
//    with release order, and the thread loads the count with acquire order before it reads the tick,
//    so it never sees the scope gone without its closing tick. Nothing else is shared.
//  * The client outlives the HeartbeatThread, and the HeartbeatThread every Busy scope of it.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <stop_token>
#include <thread>
#include <utility>

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

  // While alive, the stall limit is off; its end counts as a tick. Move-only; null: does nothing (a
  // process with no heartbeat thread). Scopes may nest and come from any thread.
  class Busy {
   public:
    explicit Busy(HeartbeatThread* thread);
    Busy(Busy&& other) noexcept : thread_(std::exchange(other.thread_, nullptr)) {}
    Busy& operator=(Busy&&) = delete;
    ~Busy();

   private:
    HeartbeatThread* thread_;
  };

  // Whether the thread beats when it wakes at `now_ns` (CLOCK_MONOTONIC): pure, so tests drive time.
  [[nodiscard]] bool beats_at(std::uint64_t now_ns) const;

 private:
  void run(const std::stop_token& stop);
  const ControlClient& client_;
  const std::chrono::milliseconds period_;
  const std::uint64_t stall_limit_ns_;
  std::atomic<std::uint64_t> last_tick_ns_;
  std::atomic<std::uint32_t> busy_{0};  // live Busy scopes
  std::mutex mutex_;
  std::condition_variable_any wake_;
  std::jthread thread_;  // last: starts after, and is joined before, everything it reads
};

}  // namespace tandem::shm
