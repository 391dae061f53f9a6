// Lock annotations that clang checks (-Wthread-safety, on in every clang build: meson.build), and the
// annotated mutex they need: libstdc++'s std::mutex carries no annotations, so the analysis cannot
// see it taken. Torch-free; outside clang every macro is empty and Mutex is a plain std::mutex.
//
//   Mutex mu_;                      a capability
//   int n_ GUARDED_BY(mu_);         read or written only with mu_ held
//   void f() REQUIRES(mu_);         callers hold mu_ (comments used to say "mutex held")
//   void g() EXCLUDES(mu_);         callers must not hold mu_ (g takes it)
//   MutexLock lock(mu_);            holds mu_ until the end of the scope, or lock.unlock()
//   lock.wait(cv_, [&]() REQUIRES(mu_) { return n_ > 0; });   the predicate runs with mu_ held
//
// Waiting: MutexLock::wait* releases the mutex inside and holds it again on return, which the
// analysis treats as held throughout (as it is, wherever the caller's code runs). A predicate is a
// function of its own to the analysis: annotate it REQUIRES(the mutex), as above. A function that
// releases the mutex for a while (a slow call made unlocked) calls mu_.unlock() and mu_.lock() on
// the Mutex itself: a MutexLock passed by reference cannot say which mutex it holds.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

#if defined(__clang__)
#define TANDEM_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define TANDEM_THREAD_ANNOTATION(x)
#endif

#define CAPABILITY(x) TANDEM_THREAD_ANNOTATION(capability(x))
#define SCOPED_CAPABILITY TANDEM_THREAD_ANNOTATION(scoped_lockable)
#define GUARDED_BY(x) TANDEM_THREAD_ANNOTATION(guarded_by(x))
#define REQUIRES(...) TANDEM_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define EXCLUDES(...) TANDEM_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define ACQUIRE(...) TANDEM_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define RELEASE(...) TANDEM_THREAD_ANNOTATION(release_capability(__VA_ARGS__))

namespace tandem {

class CAPABILITY("mutex") Mutex {
 public:
  void lock() ACQUIRE() { mutex_.lock(); }
  void unlock() RELEASE() { mutex_.unlock(); }

 private:
  friend class MutexLock;
  std::mutex mutex_;
};

// std::lock_guard and std::unique_lock in one: scoped, and usable with std::condition_variable.
class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mutex) ACQUIRE(mutex) : lock_(mutex.mutex_) {}
  ~MutexLock() RELEASE() = default;  // lock_ releases; the annotation tells the analysis
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  void lock() ACQUIRE() { lock_.lock(); }
  void unlock() RELEASE() { lock_.unlock(); }

  template <class Predicate>
  void wait(std::condition_variable& cv, Predicate ready) {
    cv.wait(lock_, ready);
  }
  template <class Rep, class Period, class Predicate>
  bool wait_for(std::condition_variable& cv, std::chrono::duration<Rep, Period> timeout, Predicate ready) {
    return cv.wait_for(lock_, timeout, ready);
  }
  template <class Clock, class Duration, class Predicate>
  bool wait_until(std::condition_variable& cv, std::chrono::time_point<Clock, Duration> deadline, Predicate ready) {
    return cv.wait_until(lock_, deadline, ready);
  }

 private:
  std::unique_lock<std::mutex> lock_;
};

}  // namespace tandem
