// StepWorkers (envs/step_workers.hpp), the threads VecEnv steps its envs on: every item runs once a
// run however the slices split, a slow item's slice is finished by the other threads, the lowest
// item that threw is rethrown, and a run allocates nothing.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <new>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "envs/step_workers.hpp"
#include "tests/count_allocations.hpp"  // `allocations`: this binary's heap allocations

using tandem::envs::StepWorkers;

namespace {

// Work of a few microseconds that varies with (item, run), so the threads finish their slices at
// different times and steal from each other.
void busy(int item, int run) {
  volatile unsigned sink = 0;
  for (unsigned k = 0; k < 200u * static_cast<unsigned>((item * 7 + run * 3) % 11); ++k) sink = sink + k;
}

// Blocks until `finished` reaches `target` or 20 s pass; true when it got there.
bool wait_for(const std::atomic<int>& finished, int target) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (finished.load() < target)
    if (std::chrono::steady_clock::now() > deadline) return false;
    else std::this_thread::sleep_for(std::chrono::microseconds(100));
  return true;
}

}  // namespace

TEST_CASE(
    "step workers: every item runs exactly once a run, uneven slices and one item a thread included, "
    "and sees what it wrote last run on whichever thread" *
    doctest::timeout(60)) {
  struct Shape {
    int items, threads;
  };
  for (const Shape shape : {Shape{7, 3}, Shape{64, 4}, Shape{5, 5}, Shape{2, 2}, Shape{100, 7}}) {
    CAPTURE(shape.items);
    CAPTURE(shape.threads);
    StepWorkers workers(shape.items, shape.threads);
    REQUIRE(workers.threads() == shape.threads);
    std::vector<int> runs(static_cast<std::size_t>(shape.items), 0);  // plain ints: the barriers publish them
    constexpr int kRuns = 300;
    for (int run = 0; run < kRuns; ++run) {
      const auto job = [&](int i) {
        busy(i, run);
        ++runs[static_cast<std::size_t>(i)];
      };
      workers.run(job);
    }
    for (int i = 0; i < shape.items; ++i) CHECK(runs[static_cast<std::size_t>(i)] == kRuns);
  }
}

TEST_CASE("step workers: a slow item holds up only itself, as the other threads run the rest of its slice" *
          doctest::timeout(60)) {
  constexpr int kItems = 8, kThreads = 3;  // slices {0, 1, 2}, {3, 4, 5}, {6, 7}
  const std::thread::id caller = std::this_thread::get_id();
  for (const int slow : {0, 3}) {  // the front of the caller's slice, of a worker's
    CAPTURE(slow);
    StepWorkers workers(kItems, kThreads);
    std::vector<std::thread::id> ran_on(kItems);
    std::vector<int> runs(kItems, 0), started(kItems, 0);
    std::atomic<int> starts{0}, finished{0};
    bool others_finished_first = false;
    const auto job = [&](int i) {
      started[static_cast<std::size_t>(i)] = starts.fetch_add(1);
      ran_on[static_cast<std::size_t>(i)] = std::this_thread::get_id();
      ++runs[static_cast<std::size_t>(i)];
      if (i == slow) others_finished_first = wait_for(finished, kItems - 1);
      finished.fetch_add(1);
    };
    workers.run(job);
    CHECK(others_finished_first);
    for (int i = 0; i < kItems; ++i) CHECK(runs[static_cast<std::size_t>(i)] == 1);
    for (int i = slow + 1; i < slow + 3; ++i) {  // the rest of the slow item's slice
      CAPTURE(i);
      const auto at = static_cast<std::size_t>(i), held = static_cast<std::size_t>(slow);
      // The caller claims its own slice front first, so once item 0 holds it the others take 1 and 2.
      if (slow == 0) CHECK(ran_on[at] != caller);
      // Whoever ran the slow item ran nothing after it: an item that started later ran elsewhere.
      CHECK((ran_on[at] != ran_on[held] || started[at] < started[held]));
    }
  }
}

TEST_CASE(
    "step workers: run() rethrows the lowest item that threw, whichever thread ran it, after every other "
    "item ran" *
    doctest::timeout(60)) {
  constexpr int kItems = 9, kThreads = 3;  // slices {0, 1, 2}, {3, 4, 5}, {6, 7, 8}
  StepWorkers workers(kItems, kThreads);
  std::vector<int> throwing;
  std::vector<int> runs(kItems, 0);
  std::atomic<int> finished{0};
  const std::thread::id caller = std::this_thread::get_id();
  std::thread::id item_2_ran_on;
  // Item 0 waits for all the others, so items 1 and 2 of its slice run on the workers.
  const auto job = [&](int i) {
    ++runs[static_cast<std::size_t>(i)];
    if (i == 0) (void)wait_for(finished, kItems - 1);
    if (i == 2) item_2_ran_on = std::this_thread::get_id();
    finished.fetch_add(1);
    for (int t : throwing)
      if (t == i) throw std::runtime_error("item " + std::to_string(i));
  };
  const auto error_of_run = [&] {
    finished = 0;
    try {
      workers.run(job);
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
    return std::string();
  };

  throwing = {8, 4, 2};
  CHECK(error_of_run() == "item 2");
  CHECK(item_2_ran_on != caller);
  for (int i = 0; i < kItems; ++i) CHECK(runs[static_cast<std::size_t>(i)] == 1);
  throwing = {};
  CHECK(error_of_run().empty());  // the last run's exceptions are gone
  throwing = {8};
  CHECK(error_of_run() == "item 8");
  for (int i = 0; i < kItems; ++i) CHECK(runs[static_cast<std::size_t>(i)] == 3);
}

TEST_CASE("step workers: a run allocates nothing, stolen items included" * doctest::timeout(60)) {
  StepWorkers workers(16, 4);
  std::vector<int> runs(16, 0);
  int run = 0;
  const auto job = [&](int i) {
    busy(i, run);
    ++runs[static_cast<std::size_t>(i)];
  };
  workers.run(job);  // a first run, so whatever the threads set up once is done
  const long before = allocations.load();
  for (run = 1; run < 1000; ++run) workers.run(job);
  CHECK(allocations.load() == before);
  CHECK(runs[0] == 1000);
}
