// The harness's doctest listeners (watchdog.cpp, case_check.cpp) derive from Listener, which answers
// every event of doctest's reporter interface with nothing, so each overrides only what it watches.
// Listeners run on the test binary's main thread, in the order of their REGISTER_LISTENER priority.
#pragma once

#include <doctest/doctest.h>

namespace tandem::test {

struct Listener : doctest::IReporter {
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats&) override {}
  void test_case_start(const doctest::TestCaseData&) override {}
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats&) override {}
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}
};

}  // namespace tandem::test
