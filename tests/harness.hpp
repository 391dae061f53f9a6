// Test harness shared by every test binary: doctest's main, plus re-running the test binary itself
// as a child process (STYLE.md: "a test re-runs itself as the child process").
//
//   TANDEM_CHILD("reader") { ... return 0; }           // registers a child entry point
//   Child c = spawn_child("reader", {"arg1"});          // runs this binary as that child
//   int status = c.wait();                               // exit status (128+sig when killed)
//
// A child gets its arguments in child_args(). Children are killed and reaped by ~Child, so a failed
// CHECK never leaves one behind; a child whose test process dies is killed too (PR_SET_PDEATHSIG).
//
// Watchdog (tests/watchdog.cpp): every test case runs under alarm() for its doctest::timeout + 5 s, or
// TANDEM_TEST_WATCHDOG_S (default 60 s) without one; past that the test binary names the test case,
// kills the children it spawned and exits 124, so a deadlock fails in seconds.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace tandem::test {

using ChildMain = std::function<int()>;
// Records that this binary needs `n` GPUs (TANDEM_GPU_TEST_BINARY); returns n.
int require_gpus(int n);
bool register_child(const std::string& name, ChildMain fn);
const std::vector<std::string>& child_args();

class Child {
 public:
  Child() = default;
  explicit Child(pid_t pid);
  Child(Child&& o) noexcept : pid_(o.pid_) { o.pid_ = -1; }
  Child& operator=(Child&& o) noexcept;
  ~Child();
  pid_t pid() const { return pid_; }
  int wait();                                                     // blocks; exit code, or 128+signal
  bool wait_for(std::chrono::milliseconds timeout, int& status);  // false on timeout
  void kill(int sig);

 private:
  pid_t pid_ = -1;
};

Child spawn_child(const std::string& name, const std::vector<std::string>& args = {});
// Waits (10 s at most) until `pid`, a child of this process, is a zombie: exited, not yet reaped.
bool became_zombie(pid_t pid);
// A forked child that exits at once and that nobody waits for: a zombie (Z in /proc/<pid>/stat) from
// the return of this call until its Child reaps it.
Child zombie_child();
// Runs another program (argv[0] is its path); with output_fd >= 0 its stdout and stderr go there.
Child spawn_program(const std::vector<std::string>& argv, int output_fd = -1);

// The pids the watchdog kills when a test case overruns. Child does this itself; a test that forks
// or spawns processes some other way registers them here.
void watchdog_track_child(pid_t pid);
void watchdog_forget_child(pid_t pid);

// A unique name for segments made by this test process, so parallel tests never collide.
std::string unique_name(const std::string& stem);

// The value of an environment variable tests/meson.build gives the test (a program's path, the
// source tree); unset, it throws naming the variable, so a test run by hand says what to set instead
// of running whatever `tandem` is on the PATH.
std::string required_env(const char* variable);
// Path to the built `tandem` binary and the source tree: required_env of TANDEM_BINARY and
// TANDEM_SOURCE_ROOT.
std::string tandem_binary();
std::string source_root();
// A python3 that imports numpy (TANDEM_PYTHON, chosen by tests/meson.build), for the format readers.
std::string python_with_numpy();

// The message of the UserError that fn throws, or "" when it throws none.
std::string error_of(const std::function<void()>& fn);

// The file this process maps at `address` ("/dev/shm/tandem...."), from /proc/self/maps; "" for none.
std::string mapping_of(const void* address);

// A fresh directory under the temporary directory (mkdtemp), removed with its contents on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

// Runs a shell command, returning its exit code and combined output.
struct CommandResult {
  int status;
  std::string output;
};
CommandResult run_command(const std::string& command);

// A port on 127.0.0.1 that the kernel reported free just now (another process may still take it).
int free_loopback_port();

// How many times `what` occurs in `text` (not overlapping): "said once" checks on a program's output.
inline std::size_t count_of(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++n;
  return n;
}

}  // namespace tandem::test

// A GPU test binary says so in any of its files: TANDEM_GPU_TEST_BINARY();
// Without a visible GPU it then prints why and exits 77, which meson reports as SKIP. Several files of
// one binary may say so (the LibTorch GPU tests share one): the largest count holds.
#define TANDEM_GPU_TEST_BINARY() TANDEM_MULTI_GPU_TEST_BINARY(1)
// A binary whose every case needs `n` GPUs: with fewer it exits 77 (skipped, saying why), never "OK".
#define TANDEM_MULTI_GPU_TEST_BINARY(n) \
  [[maybe_unused]] static const int TANDEM_CHILD_CAT(tandem_gpus_required_, __LINE__) = ::tandem::test::require_gpus(n)

#define TANDEM_CHILD_CAT2(a, b) a##b
#define TANDEM_CHILD_CAT(a, b) TANDEM_CHILD_CAT2(a, b)
#define TANDEM_CHILD(name)                                                                          \
  static int TANDEM_CHILD_CAT(tandem_child_fn_, __LINE__)();                                        \
  static const bool TANDEM_CHILD_CAT(tandem_child_reg_, __LINE__) = ::tandem::test::register_child( \
      name, TANDEM_CHILD_CAT(tandem_child_fn_, __LINE__));                                          \
  static int TANDEM_CHILD_CAT(tandem_child_fn_, __LINE__)()
