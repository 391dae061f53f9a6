#include "tools/run/child_process.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "common/error.hpp"
#include "common/file_descriptor.hpp"

namespace tandem::run {

ExitStatus ExitStatus::from_wait_status(int status) {
  ExitStatus s;
  if (WIFEXITED(status)) s.code = WEXITSTATUS(status);
  else if (WIFSIGNALED(status)) s.signal = WTERMSIG(status);
  return s;
}

std::string signal_name(int sig) {
  if (const char* abbrev = ::sigabbrev_np(sig)) return fmt::format("SIG{}", abbrev);
  return fmt::format("signal {}", sig);
}

std::string ExitStatus::describe() const {
  if (signal) return fmt::format("was killed by {}", signal_name(signal));
  return fmt::format("exited with status {}", code);
}

namespace {

// Closes every descriptor from `from` upwards except `keep`: close_range where the kernel has it,
// else one close() per possible descriptor. Async-signal-safe.
void close_from(int from, int keep) {
  auto close_range = [](unsigned lo, unsigned hi) { return ::syscall(SYS_close_range, lo, hi, 0u); };
  if (close_range(static_cast<unsigned>(from), static_cast<unsigned>(keep) - 1) == 0 &&
      close_range(static_cast<unsigned>(keep) + 1, ~0u) == 0)
    return;
  long max = ::sysconf(_SC_OPEN_MAX);
  if (max < 0 || max > 65536) max = 65536;
  for (int fd = from; fd < max; ++fd)
    if (fd != keep) ::close(fd);
}

[[noreturn]] void child_after_fork(const char* program, char* const* argv, char* const* envp, int out_w, int err_w,
                                   int status_w, pid_t parent) {
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (::getppid() != parent) ::_exit(126);  // the launcher died before prctl took effect
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig)
    if (sig != SIGKILL && sig != SIGSTOP) ::sigaction(sig, &dfl, nullptr);  // ignored signals survive exec
  int null_fd = ::open("/dev/null", O_RDONLY);
  if (null_fd < 0 || ::dup2(null_fd, 0) < 0 || ::dup2(out_w, 1) < 0 || ::dup2(err_w, 2) < 0) {
    int err = errno;
    ssize_t ignored = ::write(status_w, &err, sizeof err);
    (void)ignored;
    ::_exit(127);
  }
  close_from(3, status_w);  // status_w is close-on-exec: it closes itself when exec succeeds
  ::execve(program, argv, envp);
  int err = errno;
  ssize_t ignored = ::write(status_w, &err, sizeof err);
  (void)ignored;
  ::_exit(127);
}

struct Pipe {
  FileDescriptor read, write;
  Pipe() {
    int fds[2];
    TANDEM_CHECK_SYS(::pipe2(fds, O_CLOEXEC));
    read.reset(fds[0]);
    write.reset(fds[1]);
  }
};

}  // namespace

ChildProcess ChildProcess::spawn(const Spec& spec) {
  // Everything the child needs is built before fork: after it, only async-signal-safe calls.
  const std::string program = spec.program.string();
  std::vector<std::string> argv_s;
  argv_s.push_back(program);
  argv_s.insert(argv_s.end(), spec.args.begin(), spec.args.end());
  std::vector<char*> argv, envp;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_s = spec.env;
  for (auto& e : env_s) envp.push_back(e.data());
  envp.push_back(nullptr);

  Pipe out, err, status;
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) TANDEM_FAIL_SYS(errno, "fork");
  if (pid == 0)
    child_after_fork(program.c_str(), argv.data(), envp.data(), out.write.get(), err.write.get(), status.write.get(),
                     parent);

  ChildProcess child;
  child.pid_ = pid;
  ::setpgid(pid, pid);  // also here, so a signal sent right after spawn() finds the group
  out.write.reset();
  err.write.reset();
  status.write.reset();
  int exec_errno = 0;
  ssize_t n;
  do n = ::read(status.read.get(), &exec_errno, sizeof exec_errno);
  while (n < 0 && errno == EINTR);
  if (n > 0) {
    ::waitpid(pid, nullptr, 0);
    child.pid_ = -1;
    fail("cannot start {}: {}", program, std::strerror(exec_errno));
  }
  child.stdout_fd_ = std::move(out.read);
  child.stderr_fd_ = std::move(err.read);
  for (int fd : {child.stdout_fd_.get(), child.stderr_fd_.get()})
    TANDEM_CHECK_SYS(::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK));
  return child;
}

ChildProcess::ChildProcess(ChildProcess&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)),
      stdout_fd_(std::move(other.stdout_fd_)),
      stderr_fd_(std::move(other.stderr_fd_)) {}

ChildProcess& ChildProcess::operator=(ChildProcess&& other) noexcept {
  if (this != &other) {
    reset();
    pid_ = std::exchange(other.pid_, -1);
    stdout_fd_ = std::move(other.stdout_fd_);
    stderr_fd_ = std::move(other.stderr_fd_);
  }
  return *this;
}

ChildProcess::~ChildProcess() { reset(); }

void ChildProcess::reset() noexcept {
  if (pid_ > 0) {
    signal(SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  stdout_fd_.reset();
  stderr_fd_.reset();
}

int ChildProcess::release_stdout() { return stdout_fd_.release(); }
int ChildProcess::release_stderr() { return stderr_fd_.release(); }

std::optional<ExitStatus> ChildProcess::try_wait() {
  if (pid_ <= 0) return std::nullopt;
  int status = 0;
  pid_t r;
  do r = ::waitpid(pid_, &status, WNOHANG);
  while (r < 0 && errno == EINTR);
  if (r == 0) return std::nullopt;
  if (r < 0) TANDEM_FAIL_SYS(errno, "waitpid");
  pid_ = -1;
  return ExitStatus::from_wait_status(status);
}

void ChildProcess::signal(int sig) const {
  if (pid_ <= 0) return;
  ::kill(-pid_, sig);  // the group: helpers the program started go with it
  ::kill(pid_, sig);   // and the process itself, should it have moved to another group
}

}  // namespace tandem::run
