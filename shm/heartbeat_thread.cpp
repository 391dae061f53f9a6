#include "shm/heartbeat_thread.hpp"

namespace tandem::shm {

HeartbeatThread::HeartbeatThread(const ControlClient& client, std::chrono::milliseconds period,
                                 std::chrono::milliseconds stall_limit)
    : client_(client),
      period_(period),
      stall_limit_ns_(static_cast<std::uint64_t>(std::chrono::nanoseconds(stall_limit).count())),
      last_tick_ns_(monotonic_ns()),
      thread_([this](const std::stop_token& stop) { run(stop); }) {
  client_.heartbeat();
}

HeartbeatThread::Busy::Busy(HeartbeatThread* thread) : thread_(thread) {
  if (thread_) thread_->busy_.fetch_add(1, std::memory_order_relaxed);
}

HeartbeatThread::Busy::~Busy() {
  if (!thread_) return;
  thread_->tick();  // before the count drops: the limit counts from the end of the long call
  thread_->busy_.fetch_sub(1, std::memory_order_release);
}

bool HeartbeatThread::beats_at(std::uint64_t now_ns) const {
  if (stall_limit_ns_ == 0 || busy_.load(std::memory_order_acquire) > 0) return true;
  const std::uint64_t last = last_tick_ns_.load(std::memory_order_relaxed);
  return now_ns <= last || now_ns - last < stall_limit_ns_;
}

void HeartbeatThread::run(const std::stop_token& stop) {
  std::unique_lock lock(mutex_);
  while (!stop.stop_requested()) {
    if (beats_at(monotonic_ns())) client_.heartbeat();
    // Returns early when the destructor requests the stop: the predicate is only the stop itself.
    wake_.wait_for(lock, stop, period_, [] { return false; });
  }
}

}  // namespace tandem::shm
