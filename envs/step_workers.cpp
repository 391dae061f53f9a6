#include "envs/step_workers.hpp"

#include <algorithm>

namespace tandem::envs {
namespace {

constexpr std::uint64_t kBack = std::uint64_t{1} << 32;  // one step of the back half of a claim word

std::uint64_t pack(int front, int back) {
  return static_cast<std::uint64_t>(static_cast<std::uint32_t>(back)) << 32 | static_cast<std::uint32_t>(front);
}
int front_of(std::uint64_t bounds) { return static_cast<std::int32_t>(static_cast<std::uint32_t>(bounds)); }
int back_of(std::uint64_t bounds) { return static_cast<std::int32_t>(static_cast<std::uint32_t>(bounds >> 32)); }

}  // namespace

StepWorkers::StepWorkers(int items, int threads)
    : items_(items), slices_(static_cast<std::size_t>(threads)), start_(threads), done_(threads) {
  const int per_slice = items / threads, longer = items % threads;  // the first `longer` slices get one more
  for (int k = 0; k < threads; ++k) {
    Slice& s = slices_[static_cast<std::size_t>(k)];
    s.begin = k * per_slice + std::min(k, longer);
    s.end = s.begin + per_slice + (k < longer ? 1 : 0);
    s.lowest_error = items;
  }
  threads_.reserve(static_cast<std::size_t>(threads - 1));
  try {
    for (int k = 1; k < threads; ++k) threads_.emplace_back([this, k] { work(k); });
  } catch (...) {
    // The threads that did not start never arrive: drop their places, then stop and join the others.
    for (int missing = static_cast<int>(threads_.size()) + 1; missing < threads; ++missing) start_.arrive_and_drop();
    stop();
    throw;
  }
}

StepWorkers::~StepWorkers() { stop(); }

void StepWorkers::stop() {
  stopping_ = true;
  start_.arrive_and_wait();
  threads_.clear();  // joins
}

void StepWorkers::run_item(Slice& mine, int i) {
  try {
    call_(job_, i);
  } catch (...) {
    if (i < mine.lowest_error) {
      mine.lowest_error = i;
      mine.error = std::current_exception();
    }
  }
}

void StepWorkers::run_items(int k) {
  const int n = threads();
  Slice& mine = slices_[static_cast<std::size_t>(k)];
  for (;;) {  // own slice, from the front
    const std::uint64_t old = mine.bounds.fetch_add(1, std::memory_order_relaxed);
    if (front_of(old) >= back_of(old)) break;
    run_item(mine, front_of(old));
  }
  for (int step = 1; step < n; ++step) {  // the others' slices, from the back
    std::atomic<std::uint64_t>& bounds = slices_[static_cast<std::size_t>((k + step) % n)].bounds;
    std::uint64_t seen = bounds.load(std::memory_order_relaxed);  // read first: an empty slice's line stays shared
    while (front_of(seen) < back_of(seen)) {
      const std::uint64_t old = bounds.fetch_sub(kBack, std::memory_order_relaxed);
      if (front_of(old) >= back_of(old)) break;
      run_item(mine, back_of(old) - 1);
      seen = old - kBack;
    }
  }
}

void StepWorkers::work(int k) {
  for (;;) {
    start_.arrive_and_wait();
    if (stopping_) return;
    run_items(k);
    (void)done_.arrive();  // only the caller waits for the run's end; this thread goes on to wait at start
  }
}

void StepWorkers::run_erased(const void* job, Call call) {
  job_ = job;
  call_ = call;
  for (Slice& s : slices_) s.bounds.store(pack(s.begin, s.end), std::memory_order_relaxed);
  start_.arrive_and_wait();
  run_items(0);
  done_.arrive_and_wait();
  Slice* first = nullptr;
  for (Slice& s : slices_)
    if (s.lowest_error < items_ && (first == nullptr || s.lowest_error < first->lowest_error)) first = &s;
  if (first == nullptr) return;
  std::exception_ptr error = std::move(first->error);
  for (Slice& s : slices_) {
    s.lowest_error = items_;
    s.error = nullptr;
  }
  std::rethrow_exception(error);
}

}  // namespace tandem::envs
