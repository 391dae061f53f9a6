#define DOCTEST_CONFIG_IMPLEMENT
#include "tests/harness.hpp"

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <stdexcept>
#include <thread>

#include "common/cuda.hpp"
#include "common/error.hpp"
#include "common/file_descriptor.hpp"
#include "common/process.hpp"
#include "tests/case_check.hpp"

namespace tandem::test {
namespace {

int g_gpus_required = 0;  // constant-initialized: registrations from other files' static initializers are safe

std::map<std::string, ChildMain>& registry() {
  static std::map<std::string, ChildMain> r;
  return r;
}
std::vector<std::string> g_child_args;
std::string g_self;

int decode(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

}  // namespace

int require_gpus(int n) {
  g_gpus_required = std::max(g_gpus_required, n);
  return n;
}

bool register_child(const std::string& name, ChildMain fn) {
  registry()[name] = std::move(fn);
  return true;
}

const std::vector<std::string>& child_args() { return g_child_args; }

Child::Child(pid_t pid) : pid_(pid) { watchdog_track_child(pid); }

Child& Child::operator=(Child&& o) noexcept {
  std::swap(pid_, o.pid_);
  return *this;
}

Child::~Child() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    watchdog_forget_child(pid_);
  }
}

int Child::wait() {
  int status = 0;
  ::waitpid(pid_, &status, 0);
  watchdog_forget_child(pid_);
  pid_ = -1;
  return decode(status);
}

bool Child::wait_for(std::chrono::milliseconds timeout, int& status) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    int raw = 0;
    if (::waitpid(pid_, &raw, WNOHANG) == pid_) {
      watchdog_forget_child(pid_);
      pid_ = -1;
      status = decode(raw);
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

void Child::kill(int sig) {
  if (pid_ > 0) ::kill(pid_, sig);
}

bool became_zombie(pid_t pid) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (;;) {
    const auto id = process_identity(static_cast<std::uint32_t>(pid));
    if (id && id->state == 'Z') return true;
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

Child zombie_child() {
  const pid_t pid = ::fork();
  if (pid < 0) TANDEM_FAIL_SYS(errno, "fork");
  if (pid == 0) ::_exit(0);
  Child child(pid);
  if (!became_zombie(pid)) throw std::runtime_error(fmt::format("child {} did not become a zombie in 10 s", pid));
  return child;
}

Child spawn_program(const std::vector<std::string>& argv_s, int output_fd) {
  std::vector<std::string> copy = argv_s;
  std::vector<char*> argv;
  argv.reserve(copy.size() + 1);
  for (auto& s : copy) argv.push_back(s.data());
  argv.push_back(nullptr);
  const pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) std::_Exit(127);  // the test process died before prctl took effect
    if (output_fd >= 0 && (::dup2(output_fd, 1) < 0 || ::dup2(output_fd, 2) < 0)) std::_Exit(127);
    ::execv(argv[0], argv.data());
    std::_Exit(127);
  }
  REQUIRE(pid > 0);
  return Child(pid);
}

Child spawn_child(const std::string& name, const std::vector<std::string>& args) {
  std::vector<std::string> argv = {g_self, "--tandem-child=" + name};
  argv.insert(argv.end(), args.begin(), args.end());
  return spawn_program(argv);
}

std::string unique_name(const std::string& stem) {
  static std::atomic<int> counter{0};
  return fmt::format("{}-{}-{}", stem, ::getpid(), counter++);
}

std::string mapping_of(const void* address) {
  std::ifstream maps("/proc/self/maps");
  const auto at = reinterpret_cast<std::uintptr_t>(address);
  for (std::string line; std::getline(maps, line);) {
    std::uintptr_t lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx", &lo, &hi) != 2 || at < lo || at >= hi) continue;
    const auto path = line.find('/');
    return path == std::string::npos ? "" : line.substr(path);
  }
  return "";
}

std::string required_env(const char* variable) {
  const char* value = std::getenv(variable);
  if (value == nullptr)
    throw std::runtime_error(std::string(variable) +
                             " is not set: run the test through `meson test -C build` (tests/meson.build sets it), "
                             "or set it as meson would");
  return value;
}

std::string tandem_binary() { return required_env("TANDEM_BINARY"); }
std::string source_root() { return required_env("TANDEM_SOURCE_ROOT"); }

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

TempDir::TempDir() {
  std::string pattern = (std::filesystem::temp_directory_path() / "tandem-test-XXXXXX").string();
  if (::mkdtemp(pattern.data()) == nullptr) TANDEM_FAIL_SYS(errno, "mkdtemp(" + pattern + ")");
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

std::string python_with_numpy() {
  const char* p = std::getenv("TANDEM_PYTHON");
  return p ? p : "/usr/bin/python3";
}

CommandResult run_command(const std::string& command) {
  CommandResult r{-1, {}};
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return r;
  std::array<char, 4096> buf{};
  size_t n = 0;
  while ((n = std::fread(buf.data(), 1, buf.size(), pipe)) > 0) r.output.append(buf.data(), n);
  r.status = decode(::pclose(pipe));
  return r;
}

int free_loopback_port() {
  const FileDescriptor fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  const bool found = fd.get() >= 0 && ::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
                     ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&a), &len) == 0;
  if (!found) throw std::runtime_error("no free TCP port on 127.0.0.1");
  return ntohs(a.sin_port);
}

}  // namespace tandem::test

int main(int argc, char** argv) {
  tandem::test::g_self = tandem::self_exe().string();

  if (argc > 1 && std::strncmp(argv[1], "--tandem-child=", 15) == 0) {
    std::string name = argv[1] + 15;
    for (int i = 2; i < argc; ++i) tandem::test::g_child_args.emplace_back(argv[i]);
    auto it = tandem::test::registry().find(name);
    if (it == tandem::test::registry().end()) {
      fmt::print(stderr, "no test child named '{}'\n", name);
      return 127;
    }
    return tandem::run_main("test-child", it->second);
  }
  if (const int needed = tandem::test::g_gpus_required; needed > 0 && tandem::cuda::device_count() < needed) {
    fmt::print("SKIP: these tests need {} CUDA GPU(s) and {} visible ({}); they run on the GPU machine\n", needed,
               tandem::cuda::device_count(), tandem::cuda::compiled() ? "built with CUDA" : "built without CUDA");
    return 77;
  }
  doctest::Context context(argc, argv);
  return tandem::test::case_check_exit_code(context.run());
}
