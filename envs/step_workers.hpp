// StepWorkers: K - 1 worker threads that, together with the thread calling run(), call one job once
// for every item in [0, N) and return when all are done, handing items to threads as they free up.
// VecEnv steps its envs on them (vec_env.hpp): one item is one env.
//
// Balancing: [0, N) is cut into K contiguous slices of N / K items (the first N % K one more), and
// thread k (0 is the caller, 1..K-1 the workers) owns slice k. Each run, thread k claims its own
// slice's items front to back, one at a time; once its slice has none left it steals from slices
// k + 1, k + 2, ... (mod K), one item at a time from the back, until every slice is empty. So when
// the work is even every item runs on its owner's thread, run after run (so an env's mjData mostly
// stays in one core's cache), and when it is not, the items that move are the slow slices' tails. A
// slow item (contacts, a reset) or a thread that wakes late holds up that one item, not its slice:
// a run lasts about its work over K plus one item, not as long as its slowest slice.
// Which thread runs an item may change from run to run, so a job must compute the same whatever
// thread it runs on: no thread-locals or per-thread buffers in its results, and the same
// floating-point environment on every thread (the workers inherit the constructing thread's).
//
// Contract:
//  * One owner thread constructs, calls run() and destroys; run() is not reentrant and never called
//    from inside a job. A job is called on any of the K threads, concurrently for different items.
//  * Claims: slice k's unclaimed items are [front, back), packed in one 64-bit atomic (back in the
//    high half). Thread k claims `front` with fetch_add(1), a thief claims `back - 1` with
//    fetch_sub(1 << 32); a claim holds when the value it replaced had front < back. Each claim is one
//    read-modify-write of the word, so every item is claimed exactly once whatever the interleaving,
//    and the claims publish nothing (the barriers below do): they are relaxed, and so is the
//    caller's reset of the words before `start`. A thread that finds a slice empty never claims from
//    it again that run, so front overshoots its slice's end by at most 1 and back undershoots its
//    begin by at most K - 1; each half is read as a signed 32-bit int.
//  * Publication is by two std::barrier phases per run(): the caller resets the slices and stores
//    the job, then arrives at `start`, which happens-before each worker's return from it; each
//    thread's job calls (whichever items it claimed) happen-before its arrival at `done`, which
//    happens-before the caller's return from `done`. So a job may read what the caller wrote before
//    run(), the caller reads what every item wrote after it, and an item run on thread A in one run
//    and on thread B in the next sees what A wrote: A's arrival at `done` happens-before the caller's
//    return from it, which happens-before the caller's next arrival at `start`.
//  * Waiting: a worker arrives at `done` without waiting there and goes on to wait at `start`; only
//    the caller waits for `done`. So a run wakes each sleeping worker once, at `start`. libstdc++'s
//    barrier spins a few iterations, then sleeps on a futex; a worker that wakes late loses the tail
//    of its slice to the threads already running rather than delaying the run.
//  * run() allocates nothing (the job is passed by reference, type-erased through a function
//    pointer) unless an item throws: then every other item still runs (or throws) and run()
//    rethrows the exception of the lowest item index that threw, whichever thread ran it.
//  * The destructor wakes the workers with a stop flag through `start` and joins them.
#pragma once

#include <atomic>
#include <barrier>
#include <cstdint>
#include <exception>
#include <thread>
#include <vector>

namespace tandem::envs {

class StepWorkers {
 public:
  // 2 <= threads <= items < 2^31 - 1: starts threads - 1 workers.
  StepWorkers(int items, int threads);
  ~StepWorkers();
  StepWorkers(const StepWorkers&) = delete;
  StepWorkers& operator=(const StepWorkers&) = delete;

  int items() const { return items_; }
  int threads() const { return static_cast<int>(slices_.size()); }

  // Calls job(i) once for every item i in [0, items()), on whichever thread claims it.
  template <class Job>
  void run(const Job& job) {
    run_erased(&job, [](const void* j, int i) { (*static_cast<const Job*>(j))(i); });
  }

 private:
  using Call = void (*)(const void*, int);
  // Slice k's claim word and what thread k records; a cache line each, so claims on one slice do not
  // slow the others.
  struct alignas(64) Slice {
    std::atomic<std::uint64_t> bounds{0};  // back << 32 | front, each as a 32-bit two's complement int
    int begin = 0, end = 0;
    int lowest_error = 0;  // the lowest item that threw on thread k this run (items_ when none)
    std::exception_ptr error;
  };

  void run_erased(const void* job, Call call);
  void run_items(int k);  // thread k's part of a run: its own slice, then the others'
  void run_item(Slice& mine, int i);
  void work(int k);
  void stop();  // wakes the workers with stopping_ set and joins them

  int items_;
  const void* job_ = nullptr;
  Call call_ = nullptr;
  bool stopping_ = false;
  std::vector<Slice> slices_;
  std::barrier<> start_, done_;
  std::vector<std::jthread> threads_;  // last: joined before the barriers they wait on go away
};

}  // namespace tandem::envs
