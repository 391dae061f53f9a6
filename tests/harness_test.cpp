#include <doctest/doctest.h>

#include <chrono>
#include <thread>

#include "common/clock.hpp"
#include "tests/harness.hpp"

using namespace tandem::test;

TEST_CASE("watchdog: the hung test case the watchdog test runs on purpose" * doctest::skip()) {
  std::this_thread::sleep_for(std::chrono::hours(1));
}

TEST_CASE("watchdog: a hung test case fails within its budget, names itself and exits 124" * doctest::timeout(30)) {
  const auto t0 = std::chrono::steady_clock::now();
  const CommandResult r = run_command("TANDEM_TEST_WATCHDOG_S=1 /proc/" + std::to_string(::getpid()) +
                                      "/exe --no-skip --test-case='*on purpose*'");
  const double seconds = tandem::seconds_since(t0);
  CHECK(r.status == 124);
  CHECK(r.output.find("watchdog: test case \"watchdog: the hung test case") != std::string::npos);
  CHECK(seconds < 10);
}
