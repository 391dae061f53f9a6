// What the `tandem run` tests share: the launcher as a child of the test with its output collected,
// a job config whose learner and actors are played by this test binary (run_launcher_children.cpp),
// and small probes (segments in /dev/shm, an HTTP GET, a free port).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "common/thread_annotations.hpp"
#include "shm/control_block.hpp"
#include "tests/harness.hpp"

namespace tandem::test {

// `tandem run ARGS` through the harness's spawner; a thread collects its stdout and stderr.
class Launcher {
 public:
  explicit Launcher(const std::vector<std::string>& args);
  ~Launcher();  // SIGKILLs the launcher if it still runs (its children follow: PR_SET_PDEATHSIG)
  Launcher(const Launcher&) = delete;
  Launcher& operator=(const Launcher&) = delete;

  pid_t pid() const { return child_.pid(); }
  std::string output();
  // Whether `text` appeared in its output within `timeout`.
  bool wait_for_output(const std::string& text, std::chrono::milliseconds timeout = std::chrono::seconds(20));
  // Exit status (128 + signal when killed), or -1 when it did not exit within `timeout`.
  int wait(std::chrono::milliseconds timeout = std::chrono::seconds(60));

 private:
  Child child_;
  std::thread reader_;
  Mutex mutex_;
  std::condition_variable grew_;
  std::string output_ GUARDED_BY(mutex_);
};

// A job config in a fresh directory, children played by this binary; write() gives its path.
struct JobFixture {
  JobFixture();
  ~JobFixture();  // removes what a failed test may have left: segments, the directory
  std::filesystem::path run_dir() const { return dir / "runs" / job; }
  std::string write() const;
  shm::ProcessSnapshot process(const std::string& role, std::uint32_t index) const;

  std::string job;
  std::filesystem::path dir;
  std::map<std::string, std::string> keys;  // [run] key -> TOML value
  std::string tables;                       // TOML written after [run]'s keys: [run.learner], [[run.group]]
  // The launcher checks the job's data before it starts anything: a small cache the config names.
  std::string data = unique_name("runtestdata");
};

// The stand-ins' key=value arguments.
std::map<std::string, std::string> child_options();
// Names of the job's segments in /dev/shm.
std::vector<std::string> segments_of(const std::string& job);
// GET path from 127.0.0.1:port; the whole response, or "" when the connection fails.
std::string http_get(int port, const std::string& path);
// Sends `request` as is to 127.0.0.1:port and returns the whole response.
std::string http_exchange(int port, const std::string& request);
std::string read_file(const std::filesystem::path& p);
// Whether `condition` held within `timeout`, checked every 20 ms.
bool eventually(const std::function<bool()>& condition, std::chrono::milliseconds timeout);

}  // namespace tandem::test
