#include "envs/slice_workers.hpp"

namespace tandem::envs {

SliceWorkers::SliceWorkers(int slices)
    : slices_(slices), errors_(static_cast<std::size_t>(slices)), start_(slices), done_(slices) {
  threads_.reserve(static_cast<std::size_t>(slices - 1));
  try {
    for (int k = 1; k < slices; ++k) threads_.emplace_back([this, k] { work(k); });
  } catch (...) {
    // The threads that did not start never arrive: drop their places, then stop and join the others.
    for (int missing = static_cast<int>(threads_.size()) + 1; missing < slices; ++missing) start_.arrive_and_drop();
    stop();
    throw;
  }
}

SliceWorkers::~SliceWorkers() { stop(); }

void SliceWorkers::stop() {
  stopping_ = true;
  start_.arrive_and_wait();
  threads_.clear();  // joins
}

void SliceWorkers::run_slice(int k) {
  try {
    call_(job_, k);
  } catch (...) {
    errors_[static_cast<std::size_t>(k)] = std::current_exception();
  }
}

void SliceWorkers::work(int k) {
  for (;;) {
    start_.arrive_and_wait();
    if (stopping_) return;
    run_slice(k);
    done_.arrive_and_wait();
  }
}

void SliceWorkers::run_erased(void* job, Call call) {
  job_ = job;
  call_ = call;
  start_.arrive_and_wait();
  run_slice(0);
  done_.arrive_and_wait();
  for (std::exception_ptr& error : errors_)
    if (error) {
      std::exception_ptr first = std::move(error);
      for (std::exception_ptr& other : errors_) other = nullptr;
      std::rethrow_exception(first);
    }
}

}  // namespace tandem::envs
