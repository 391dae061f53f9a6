// Prefetcher<T> (learner/feed/prefetcher.hpp): DeviceFeed's thread that makes steps ahead, without
// LibTorch, so it also runs under the sanitizers.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <stdexcept>
#include <thread>

#include "learner/feed/prefetcher.hpp"

using tandem::feed::Prefetcher;

namespace {

void wait_until(const std::atomic<int>& value, int at_least) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (value.load() < at_least && std::chrono::steady_clock::now() < give_up)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

}  // namespace

TEST_CASE("pop hands out results in the order they were made") {
  int next = 0;
  Prefetcher<int> p(3, [&] { return next++; });
  for (int i = 0; i < 1000; ++i) REQUIRE(p.pop() == i);
}

TEST_CASE("the thread stays at most depth results ahead of the consumer") {
  std::atomic<int> made{0};
  Prefetcher<int> p(4, [&] { return made++; });
  wait_until(made, 4);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // room for a fifth, were it allowed
  CHECK(made.load() == 4);
  for (int taken = 1; taken <= 10; ++taken) {
    p.pop();
    wait_until(made, 4 + taken);
    CHECK(made.load() <= 4 + taken);
  }
}

TEST_CASE("an exception from make arrives after the results made before it, and on every later pop") {
  int next = 0;
  Prefetcher<int> p(8, [&] {
    if (next == 5) throw std::runtime_error("the sixth step failed");
    return next++;
  });
  for (int i = 0; i < 5; ++i) CHECK(p.pop() == i);
  CHECK_THROWS_WITH_AS(p.pop(), "the sixth step failed", std::runtime_error);
  CHECK_THROWS_WITH_AS(p.pop(), "the sixth step failed", std::runtime_error);
}

TEST_CASE("destruction returns while the thread waits for room, and frees the results nobody took") {
  auto alive = std::make_shared<int>(0);
  std::atomic<int> made{0};
  {
    Prefetcher<std::shared_ptr<int>> p(2, [&] {
      ++made;
      return alive;
    });
    wait_until(made, 2);
    CHECK(alive.use_count() == 3);
  }
  CHECK(alive.use_count() == 1);
}

TEST_CASE("destruction waits for the make in progress") {
  std::atomic<int> started{0}, finished{0};
  {
    Prefetcher<int> p(1, [&] {
      ++started;
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
      return ++finished;
    });
    wait_until(started, 1);
  }
  CHECK(started.load() == finished.load());
}

TEST_CASE("a pop that waits is woken by a slow result") {
  Prefetcher<int> p(1, [] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    return 7;
  });
  CHECK(p.pop() == 7);
  CHECK(p.pop() == 7);
}

TEST_CASE("a depth of zero is refused") {
  CHECK_THROWS_AS(Prefetcher<int>(0, [] { return 0; }), std::invalid_argument);
}
