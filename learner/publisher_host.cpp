// The Publisher's CPU path (publisher.hpp): the plain copy on the training thread, and the
// overlapped one, where the copier thread copies while training runs forward and backward.
#include <algorithm>
#include <cstring>

#include "common/clock.hpp"
#include "learner/publisher.hpp"

namespace tandem::learner {

void Publisher::copy_into(std::byte* dst) {
  if (source_.snapshot) source_.snapshot(dst, nullptr);
  else std::memcpy(dst, source_.data, source_.bytes);
}

Publisher::Result Publisher::publish_host(std::uint64_t step, std::uint64_t version, std::uint64_t t0) {
  if (copier_.joinable()) return hand_to_copier(step, version, t0);
  auto slot = slab_.begin_write();
  if (!slot) return {Outcome::skipped, version};
  try {
    copy_into(slot->data);
  } catch (...) {
    slab_.abort(*slot);
    throw;
  }
  const std::uint64_t copied = monotonic_ns();
  slab_.commit(*slot, version, step, source_.bytes, t0);
  PublishTiming t;
  t.version = version;
  t.snapshot_ms = double(copied - t0) / 1e6;
  t.visible_ms = double(monotonic_ns() - t0) / 1e6;
  MutexLock lock(mutex_);
  record(t);
  return {Outcome::committed, version};
}

// Training thread: a slot for the copier, or a skip. The slab writer's calls stay on one thread at a
// time: begin_write here runs only once the copier has committed (or aborted) the previous slot.
Publisher::Result Publisher::hand_to_copier(std::uint64_t step, std::uint64_t version, std::uint64_t t0) {
  MutexLock lock(mutex_);
  lock.wait(changed_,
            [&]() REQUIRES(mutex_) { return !host_copy_; });  // only when the caller published twice without a fence
  auto slot = slab_.begin_write();
  if (!slot) return {Outcome::skipped, version};
  host_copy_ = HostCopy{*slot, version, step, t0};
  return {Outcome::in_flight, version};  // publish() wakes the copier
}

void Publisher::copier_loop() {
  run_without_preempting();
  MutexLock lock(mutex_);
  for (;;) {
    lock.wait(changed_, [&]() REQUIRES(mutex_) { return host_copy_.has_value() || stopping_; });
    if (!host_copy_) return;  // stopping and nothing in flight
    const HostCopy job = *host_copy_;
    lock.unlock();
    const std::uint64_t start = monotonic_ns();
    std::exception_ptr error;
    try {
      copy_into(job.slot.data);
    } catch (...) {
      error = std::current_exception();
    }
    const std::uint64_t copied = monotonic_ns();
    lock.lock();
    if (error) {
      slab_.abort(job.slot);
      async_error_ = error;
    } else {
      slab_.commit(job.slot, job.version, job.step, source_.bytes, job.call_ns);
      PublishTiming t;
      t.version = job.version;
      t.snapshot_ms = double(copied - start) / 1e6;
      t.visible_ms = double(monotonic_ns() - job.call_ns) / 1e6;
      record(t);
      stats_.committed++;
    }
    host_copy_.reset();
    changed_.notify_all();
  }
}

void Publisher::wait_before_update() {
  if (!copier_.joinable()) return;
  const std::uint64_t t0 = monotonic_ns();
  MutexLock lock(mutex_);
  lock.wait(changed_, [&]() REQUIRES(mutex_) { return !host_copy_; });
  const double us = double(monotonic_ns() - t0) / 1e3;
  stats_.fences++;
  stats_.total_fence_us += us;
  stats_.max_fence_us = std::max(stats_.max_fence_us, us);
}

}  // namespace tandem::learner
