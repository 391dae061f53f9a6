// Prefetcher<T>: a thread that makes results ahead of the one consumer that takes them. Torch-free.
//
// The thread calls `make` again and again, never holding more than `depth` results that pop() has
// not taken yet, and pop() hands them out in the order they were made. What makes a result slow
// (for DeviceFeed: allocating and launching a step's kernels, about 15 us of host time) then runs
// beside the consumer instead of on its thread, which for a Python training loop is the one
// thread everything else waits for.
//
// Threads: one consumer thread calls pop(); `make` runs only on the prefetcher's thread. A result's
// writes happen-before pop() returns it (the queue's mutex). If `make` throws, the results made
// before are still handed out, then pop() rethrows that exception, and again on every later call;
// the thread makes nothing more. The destructor stops the thread (after the `make` in progress, if
// any, returns) and destroys the results nobody took, on the destroying thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <utility>

namespace tandem::feed {

template <class T>
class Prefetcher {
 public:
  Prefetcher(std::size_t depth, std::function<T()> make) : depth_(depth), make_(std::move(make)) {
    if (depth_ == 0) throw std::invalid_argument("Prefetcher depth must be at least 1");
    thread_ = std::thread([this] { run(); });
  }

  ~Prefetcher() {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    space_.notify_one();
    thread_.join();
  }

  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  T pop() {
    spin_until_ready();
    std::unique_lock lock(mu_);
    ready_.wait(lock, [&] { return !queue_.empty() || error_; });
    if (queue_.empty()) std::rethrow_exception(error_);
    T out = std::move(queue_.front());
    queue_.pop_front();
    queued_.store(queue_.size(), std::memory_order_relaxed);
    lock.unlock();
    space_.notify_one();
    return out;
  }

 private:
  // A result is usually a few microseconds away; a futex wake-up costs about as much again, on the
  // consumer's critical path. So look first, for a bounded time, before sleeping on the condition.
  void spin_until_ready() const {
    const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(kSpinMicroseconds);
    while (queued_.load(std::memory_order_relaxed) == 0 && !failed_.load(std::memory_order_relaxed) &&
           std::chrono::steady_clock::now() < until) {
    }
  }

  void run() {
    for (;;) {
      {
        std::unique_lock lock(mu_);
        space_.wait(lock, [&] { return stopping_ || queue_.size() < depth_; });
        if (stopping_) return;
      }
      try {
        T made = make_();
        std::lock_guard lock(mu_);
        queue_.push_back(std::move(made));
        queued_.store(queue_.size(), std::memory_order_relaxed);
      } catch (...) {
        std::lock_guard lock(mu_);
        error_ = std::current_exception();
        failed_.store(true, std::memory_order_relaxed);
      }
      ready_.notify_one();
      if (failed_.load(std::memory_order_relaxed)) return;
    }
  }

  static constexpr int kSpinMicroseconds = 30;

  const std::size_t depth_;
  const std::function<T()> make_;
  std::mutex mu_;
  std::condition_variable ready_;  // a result or the error arrived
  std::condition_variable space_;  // a result was taken, or stopping_
  std::deque<T> queue_;
  std::exception_ptr error_;
  bool stopping_ = false;
  std::atomic<std::size_t> queued_{0};  // queue_.size(), for the spin only: pop() reads queue_ under mu_
  std::atomic<bool> failed_{false};     // error_ is set, for the spin only
  std::thread thread_;                  // last: started once every member above exists
};

}  // namespace tandem::feed
