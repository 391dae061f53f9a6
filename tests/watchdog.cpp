// The harness's watchdog: a test case that runs past its budget fails in seconds instead of waiting
// for meson's 300 s. Each test case arms alarm() for its doctest::timeout plus a margin (or
// TANDEM_TEST_WATCHDOG_S, default 60 s, when it declares none); on expiry the SIGALRM handler names the
// test case, SIGKILLs the children the harness spawned, removes the process's segments and exits 124.
// SIGTERM and SIGINT (meson's own timeout, a Ctrl-C) do the same, then end the process by that signal.
// The process's segments are the /dev/shm entries named tandem.* that hold "-<pid>-": every name a
// test makes comes from unique_name() (harness.hpp), and the jobs it starts name theirs after it.
// Async-signal-safe throughout: the handlers read a preformatted message, a fixed table of pids and
// a preformatted tag, and call write, kill, open, getdents64, unlinkat, close, raise and _exit.
#include <dirent.h>
#include <doctest/doctest.h>
#include <fcntl.h>
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
char g_pid_tag[32];  // "-<pid>-"

void kill_children() {
  for (auto& child : g_children)
    if (pid_t pid = child.load(std::memory_order_relaxed); pid > 0) ::kill(pid, SIGKILL);
}

bool is_own_segment(const char* name) {
  return std::strncmp(name, "tandem.", 7) == 0 && std::strstr(name, g_pid_tag) != nullptr;
}

// Two passes: entries removed while a directory is read may make the read skip others.
void remove_own_segments() {
  alignas(dirent64) static char entries[16384];
  for (int pass = 0; pass < 2; ++pass) {
    const int dir = ::open("/dev/shm", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir < 0) return;
    for (ssize_t n; (n = ::getdents64(dir, entries, sizeof entries)) > 0;)
      for (ssize_t at = 0; at < n;) {
        const auto* e = reinterpret_cast<const dirent64*>(entries + at);
        if (is_own_segment(e->d_name)) ::unlinkat(dir, e->d_name, 0);
        at += e->d_reclen;
      }
    ::close(dir);
  }
}

extern "C" void on_watchdog_alarm(int) {
  (void)!::write(STDERR_FILENO, g_message, g_message_bytes);
  kill_children();
  remove_own_segments();
  ::_exit(124);
}

extern "C" void on_terminate(int sig) {
  static const char kMessage[] = "\ntest process terminated: killing its children and removing its segments\n";
  (void)!::write(STDERR_FILENO, kMessage, sizeof kMessage - 1);
  kill_children();
  remove_own_segments();
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

unsigned default_budget_s() {
  const char* env = std::getenv("TANDEM_TEST_WATCHDOG_S");
  const long v = env ? std::strtol(env, nullptr, 10) : 0;
  return v > 0 ? static_cast<unsigned>(v) : 60;
}

struct WatchdogListener : Listener {
  explicit WatchdogListener(const doctest::ContextOptions&) {
    std::snprintf(g_pid_tag, sizeof g_pid_tag, "-%d-", static_cast<int>(::getpid()));
    struct sigaction sa {};
    sa.sa_handler = on_watchdog_alarm;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGALRM, &sa, nullptr);
    sa.sa_handler = on_terminate;
    ::sigaction(SIGTERM, &sa, nullptr);
    ::sigaction(SIGINT, &sa, nullptr);
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
