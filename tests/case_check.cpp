// The harness's case check: a test case either asserts something or says why it cannot run here.
// A case that returns without running one assertion (CHECK, REQUIRE, FAIL...; WARN does not count) and
// without skipping passed while testing nothing, so the binary fails naming it. A case that skips all
// or part of its checks (TANDEM_SKIP, skip_case) makes the binary exit 77 (meson: SKIP) once every
// case has run, unless one failed: "OK" always means everything ran here. A run whose filters matched
// no test case fails too, so a meson row that names the wrong file (doctest's --source-file) cannot
// pass empty.
//
// Single-threaded: doctest calls the listener, and TANDEM_SKIP runs, on the thread running the test
// cases. A child process (--tandem-child) never starts doctest, so its work counts toward no case.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "tests/case_check.hpp"
#include "tests/listener.hpp"

namespace tandem::test {
namespace {

struct Verdicts {
  bool run_ended = false;  // doctest ran test cases (not --help, --list-test-cases or --count)
  unsigned cases_run = 0;
  const char* running = nullptr;  // the case in progress, or null between cases
  bool running_skipped = false;
  std::vector<std::string> skipped;  // "name": reason
  std::vector<std::string> unasserted;
};
Verdicts g_verdicts;

struct CaseCheckListener : Listener {
  explicit CaseCheckListener(const doctest::ContextOptions&) {}
  void test_case_start(const doctest::TestCaseData& tc) override {
    g_verdicts.running = tc.m_name;
    g_verdicts.running_skipped = false;
  }
  void test_case_end(const doctest::CurrentTestCaseStats& stats) override {
    ++g_verdicts.cases_run;
    // A failed case is reported by doctest already; only a passing one can be empty.
    if (stats.testCaseSuccess && stats.numAssertsCurrentTest == 0 && !g_verdicts.running_skipped)
      g_verdicts.unasserted.emplace_back(g_verdicts.running);
    g_verdicts.running = nullptr;
  }
  void test_run_end(const doctest::TestRunStats&) override { g_verdicts.run_ended = true; }
};

}  // namespace

void skip_case(const std::string& reason) {
  if (g_verdicts.running == nullptr)
    throw std::logic_error("TANDEM_SKIP(\"" + reason + "\") outside a test case: only a test case can skip");
  g_verdicts.running_skipped = true;
  g_verdicts.skipped.push_back(fmt::format("\"{}\": {}", g_verdicts.running, reason));
  fmt::print("SKIP: test case \"{}\": {}\n", g_verdicts.running, reason);
  std::fflush(stdout);
}

int case_check_exit_code(int doctest_result) {
  if (!g_verdicts.run_ended) return doctest_result;
  for (const auto& name : g_verdicts.unasserted)
    fmt::print(
        "FAIL: test case \"{}\" ran no assertion and did not skip: check what it does, or TANDEM_SKIP(reason) "
        "when it cannot run here\n",
        name);
  if (g_verdicts.cases_run == 0)
    fmt::print("FAIL: no test case matched this run's filters: a test that runs nothing cannot pass\n");
  if (doctest_result != 0) return doctest_result;
  if (!g_verdicts.unasserted.empty() || g_verdicts.cases_run == 0) return 1;
  if (g_verdicts.skipped.empty()) return 0;
  const auto passed = g_verdicts.cases_run - g_verdicts.skipped.size();
  fmt::print("SKIP: {} of {} test cases skipped all or part of their checks here{}:\n", g_verdicts.skipped.size(),
             g_verdicts.cases_run, passed > 0 ? fmt::format(" (the other {} passed)", passed) : "");
  for (const auto& s : g_verdicts.skipped) fmt::print("  {}\n", s);
  return 77;
}

}  // namespace tandem::test

REGISTER_LISTENER("tandem-case-check", 2, tandem::test::CaseCheckListener);
