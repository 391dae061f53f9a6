#include "learner/feed/ring_workers.hpp"

#include <exception>
#include <utility>

namespace tandem::feed {

RingWorkers::RingWorkers(SlotRing& ring, unsigned count, Jobs jobs) : ring_(ring), jobs_(std::move(jobs)) {
  try {
    for (unsigned i = 0; i < count; ++i) threads_.emplace_back([this] { work(); });
  } catch (...) {
    stop_and_join();
    throw;
  }
}

RingWorkers::~RingWorkers() { stop_and_join(); }

void RingWorkers::stop_and_join() {
  ring_.stop();
  for (auto& t : threads_) t.join();
}

void RingWorkers::work() {
  try {
    if (jobs_.prepare) jobs_.prepare();
    while (auto chunk = ring_.claim()) {
      jobs_.fill(*chunk);
      if (!ring_.finish(*chunk)) continue;
      jobs_.seal(*chunk);
      ring_.mark_ready(chunk->slot);
    }
  } catch (...) {
    ring_.fail(std::current_exception());
  }
}

}  // namespace tandem::feed
