// SliceWorkers: K - 1 worker threads that, together with the thread calling run(), run one job over
// K slices and return when every slice is done. VecEnv steps its envs on them (vec_env.hpp).
//
// Contract:
//  * One owner thread constructs, calls run() and destroys; run() is not reentrant and never called
//    from inside a job. Worker k (1 <= k < K) only ever runs slice k, so whatever a slice touches is
//    touched by one fixed thread; slice 0 runs on the caller.
//  * Publication is by two std::barrier phases per run(): the caller stores the job and arrives at
//    `start`, which happens-before each worker's return from it; every worker's writes happen-before
//    the caller's return from `done`. So a job may read what the caller wrote before run(), and the
//    caller reads what every slice wrote after it, with no other synchronisation.
//  * run() allocates nothing (the job is passed by reference, type-erased through a function
//    pointer) unless a slice throws: then every slice still finishes (or throws) and run() rethrows
//    the exception of the lowest slice that threw.
//  * The destructor wakes the workers with a stop flag through `start` and joins them.
#pragma once

#include <barrier>
#include <exception>
#include <thread>
#include <vector>

namespace tandem::envs {

class SliceWorkers {
 public:
  explicit SliceWorkers(int slices);  // slices >= 2: starts slices - 1 threads
  ~SliceWorkers();
  SliceWorkers(const SliceWorkers&) = delete;
  SliceWorkers& operator=(const SliceWorkers&) = delete;

  int slices() const { return slices_; }

  // Calls job(k) for every slice k in [0, slices()): k = 0 here, the others on their workers.
  template <class Job>
  void run(Job& job) {
    run_erased(&job, [](void* j, int k) { (*static_cast<Job*>(j))(k); });
  }

 private:
  using Call = void (*)(void*, int);
  void run_erased(void* job, Call call);
  void run_slice(int k);
  void work(int k);
  void stop();  // wakes the workers with stopping_ set and joins them

  int slices_;
  void* job_ = nullptr;
  Call call_ = nullptr;
  bool stopping_ = false;
  std::vector<std::exception_ptr> errors_;
  std::barrier<> start_, done_;
  std::vector<std::jthread> threads_;  // last: joined before the barriers they wait on go away
};

}  // namespace tandem::envs
