// The harness's own checks: the watchdog (tests/watchdog.cpp) and the case check (tests/case_check.cpp),
// each through this binary run again on fixture cases that only those runs reach.
#include <doctest/doctest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "common/clock.hpp"
#include "tests/case_check.hpp"
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

TEST_CASE("terminate: the test process that holds a segment, stopped on purpose" * doctest::skip()) {
  std::ofstream("/dev/shm/tandem." + unique_name("harness") + ".ctl") << "held";
  std::this_thread::sleep_for(std::chrono::hours(1));
}

TEST_CASE("terminate: a test process stopped by SIGTERM removes its segments and ends by that signal" *
          doctest::timeout(30)) {
  Child child = spawn_program(
      {"/proc/" + std::to_string(::getpid()) + "/exe", "--no-skip", "--test-case=*stopped on purpose*"});
  const std::string segment = "/dev/shm/tandem.harness-" + std::to_string(child.pid()) + "-0.ctl";
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!std::filesystem::exists(segment) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  REQUIRE(std::filesystem::exists(segment));
  child.kill(SIGTERM);
  CHECK(child.wait() == 128 + SIGTERM);
  CHECK_FALSE(std::filesystem::exists(segment));
}

// The case check's fixtures: run only by the tests below (doctest::skip() keeps them out of a plain run).
TEST_CASE("case check fixture: a case that asserts nothing" * doctest::skip()) {}
TEST_CASE("case check fixture: a case that skips" * doctest::skip()) { TANDEM_SKIP("it cannot run here, on purpose"); }
TEST_CASE("case check fixture: a case that passes" * doctest::skip()) { CHECK(count_of("abab", "ab") == 2); }

namespace {

// This binary run again with doctest's arguments (not as a --tandem-child): its own exit code and output.
CommandResult run_self(const std::string& doctest_args) {
  return run_command("/proc/" + std::to_string(::getpid()) + "/exe --no-skip " + doctest_args);
}

}  // namespace

TEST_CASE("case check: a case that runs no assertion and does not skip fails the binary, named") {
  const CommandResult r = run_self("--test-case='case check fixture: a case that asserts nothing'");
  INFO(r.output);
  CHECK(r.status == 1);
  CHECK(r.output.find("FAIL: test case \"case check fixture: a case that asserts nothing\" ran no assertion and "
                      "did not skip") != std::string::npos);
}

TEST_CASE("case check: a skipped case makes the binary exit 77 with its reason, though another case passed") {
  const CommandResult r = run_self(
      "--test-case='case check fixture: a case that skips,case check fixture: a case that passes'");
  INFO(r.output);
  CHECK(r.status == 77);
  CHECK(count_of(r.output, "it cannot run here, on purpose") == 2);  // when it skips, and in the summary
  CHECK(r.output.find("SKIP: 1 of 2 test cases skipped all or part of their checks here") != std::string::npos);
}

TEST_CASE("case check: a passing case alone exits 0, and filters that match no case fail") {
  CHECK(run_self("--test-case='case check fixture: a case that passes'").status == 0);
  const CommandResult none = run_self("--test-case='no case has this name'");
  INFO(none.output);
  CHECK(none.status == 1);
  CHECK(none.output.find("FAIL: no test case matched this run's filters") != std::string::npos);
}
