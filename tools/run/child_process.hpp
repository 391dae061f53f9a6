// One process started by the launcher, as a move-only handle.
//
// The child runs in its own process group, so a terminal's Ctrl-C reaches only the launcher, which
// then asks the job to stop through the control block (the learner gets to checkpoint). It gets
// SIGTERM if the launcher dies (PR_SET_PDEATHSIG), stdin from /dev/null, and stdout/stderr as pipes
// whose read ends the launcher takes with release_stdout()/release_stderr(). No other descriptor of
// the launcher leaks into it. A program that cannot be executed is a UserError from spawn() naming it.
//
// Threads: the launcher's one thread. fork() is only safe because the launcher is single-threaded;
// between fork and exec the child calls only async-signal-safe functions.
// Destroying a handle whose process was not reaped kills its group with SIGKILL and reaps it, so no
// exit path of the launcher leaves a child behind.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "common/file_descriptor.hpp"

namespace tandem::run {

struct ExitStatus {
  int code = 0;    // exit code when the process exited
  int signal = 0;  // the signal that killed it, else 0
  static ExitStatus from_wait_status(int status);
  int value() const { return signal ? 128 + signal : code; }  // the shell's $? convention
  bool success() const { return signal == 0 && code == 0; }
  std::string describe() const;  // "exited with status 3", "was killed by SIGKILL"
};

class ChildProcess {
 public:
  struct Spec {
    std::filesystem::path program;
    std::vector<std::string> args;  // argv[1..]
    std::vector<std::string> env;   // the complete environment, "NAME=value"
  };
  static ChildProcess spawn(const Spec& spec);

  ChildProcess() = default;
  ChildProcess(ChildProcess&& other) noexcept;
  ChildProcess& operator=(ChildProcess&& other) noexcept;
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  ~ChildProcess();

  pid_t pid() const { return pid_; }
  bool running() const { return pid_ > 0; }
  int release_stdout();  // the read end, non-blocking and close-on-exec; the caller owns it
  int release_stderr();

  // Reaps the process if it has exited (never blocks); afterwards running() is false.
  std::optional<ExitStatus> try_wait();
  // Sends sig to the process group (and to the process, should it have left the group).
  void signal(int sig) const;

 private:
  void reset() noexcept;
  pid_t pid_ = -1;
  FileDescriptor stdout_fd_;
  FileDescriptor stderr_fd_;
};

std::string signal_name(int sig);  // "SIGKILL"

}  // namespace tandem::run
