// The harness's watchdog: a test case that runs past its budget fails in seconds instead of waiting
// for meson's 300 s. Each test case arms alarm() for its doctest::timeout plus a margin (or
// TANDEM_TEST_WATCHDOG_S, default 60 s, when it declares none); on expiry the SIGALRM handler names the
// test case, SIGKILLs the children the harness spawned, and exits 124. Async-signal-safe throughout:
// the handler only reads a preformatted message and a fixed table of pids, then calls write, kill and
// _exit.
#include <doctest/doctest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "tests/harness.hpp"
#include "tests/listener.hpp"

namespace tandem::test {
namespace {

constexpr int kMarginS = 5;
constexpr std::size_t kMaxChildren = 256;

std::atomic<pid_t> g_children[kMaxChildren];
char g_message[512];
std::size_t g_message_bytes = 0;

extern "C" void on_watchdog_alarm(int) {
  (void)!::write(STDERR_FILENO, g_message, g_message_bytes);
  for (auto& child : g_children)
    if (pid_t pid = child.load(std::memory_order_relaxed); pid > 0) ::kill(pid, SIGKILL);
  ::_exit(124);
}

unsigned default_budget_s() {
  const char* env = std::getenv("TANDEM_TEST_WATCHDOG_S");
  const long v = env ? std::strtol(env, nullptr, 10) : 0;
  return v > 0 ? static_cast<unsigned>(v) : 60;
}

struct WatchdogListener : Listener {
  explicit WatchdogListener(const doctest::ContextOptions&) {
    struct sigaction sa {};
    sa.sa_handler = on_watchdog_alarm;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGALRM, &sa, nullptr);
  }
  void test_case_start(const doctest::TestCaseData& tc) override {
    const unsigned budget = tc.m_timeout > 0 ? static_cast<unsigned>(std::ceil(tc.m_timeout)) + kMarginS
                                             : default_budget_s();
    const int n = std::snprintf(g_message, sizeof g_message,
                                "\nwatchdog: test case \"%s\" still running after %u s (%s): killing it and "
                                "its children\n",
                                tc.m_name, budget,
                                tc.m_timeout > 0 ? "its doctest::timeout + 5 s" : "the default budget");
    g_message_bytes = n > 0 ? std::min(static_cast<std::size_t>(n), sizeof g_message - 1) : 0;
    ::alarm(budget);
  }
  void test_case_end(const doctest::CurrentTestCaseStats&) override { ::alarm(0); }
};

}  // namespace

void watchdog_track_child(pid_t pid) {
  for (auto& slot : g_children) {
    pid_t empty = 0;
    if (slot.compare_exchange_strong(empty, pid)) return;
  }
}

void watchdog_forget_child(pid_t pid) {
  for (auto& slot : g_children) {
    pid_t expected = pid;
    if (slot.compare_exchange_strong(expected, 0)) return;
  }
}

}  // namespace tandem::test

REGISTER_LISTENER("tandem-watchdog", 1, tandem::test::WatchdogListener);
