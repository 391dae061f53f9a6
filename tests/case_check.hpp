// The case check (tests/case_check.cpp): every test case asserts something or says why it cannot run
// here. Called from the thread running the test cases, never from a --tandem-child.
//
//   if (run_command("command -v torchrun").status != 0) TANDEM_SKIP("no torchrun on PATH");
//
// A case that skipped, in whole or in part, makes the binary exit 77 (meson: SKIP) unless one failed;
// a case that ran no assertion and did not skip fails the binary.
#pragma once

#include <string>

namespace tandem::test {

// Records that the running test case cannot run here, in whole or in part, and prints why. The case
// goes on (past a part it could not check) unless it returns: TANDEM_SKIP does both. For conditions of
// the machine (no root, no torchrun, no NCCL), never for a failure of the code under test.
void skip_case(const std::string& reason);

// main's exit code from doctest's: 1 when a case asserted nothing without skipping or no case ran,
// 77 when a case skipped and none failed.
int case_check_exit_code(int doctest_result);

}  // namespace tandem::test

#define TANDEM_SKIP(reason)            \
  do {                                 \
    ::tandem::test::skip_case(reason); \
    return;                            \
  } while (false)
