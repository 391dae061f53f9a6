// A whole RL job under `tandem run` for the end-to-end tests (tests/rl_job_*_test.cpp): a config of
// its own (small budgets, no stop on return unless asked; never the examples' tuned values), started
// in the background with its output in a file, watched through its control block and read back from
// its run directory (metrics.jsonl, checkpoints) and /dev/shm.
#pragma once

#include <doctest/doctest.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fcntl.h>
#include <signal.h>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

#include "common/file_descriptor.hpp"
#include "shm/control_block.hpp"
#include "shm/segment.hpp"
#include "tests/harness.hpp"

namespace tandem::test {

class RlJob {
 public:
  // `extra_toml`: the job's other tables ([env], [rl], ...), written after [run]; `tandem run --set`
  // at start() changes single keys.
  explicit RlJob(const std::string& stem, std::uint32_t actors, const std::string& extra_toml)
      : id_(unique_name(stem)) {
    const std::string text = fmt::format(R"([run]
job = "{}"
unique_id = false
learners = 1
actors = {}
run_dir = "{}"
learner_program = "{}"
actor_program = "{}"
status = "plain"
restart_backoff_s = 0.1
{})",
                                         id_, actors, run_dir().string(), required_env("TANDEM_LEARNER"),
                                         required_env("TANDEM_ACTOR"), extra_toml);
    std::ofstream(config()) << text;
  }
  // A job still running when a check failed is stopped the way a user stops it (SIGINT), so it removes
  // its segments; only one that ignores that is SIGKILLed (by ~Child).
  ~RlJob() {
    if (child_.pid() <= 0) return;
    child_.kill(SIGINT);
    int status = 0;
    if (child_.wait_for(std::chrono::seconds(20), status)) child_ = Child();
  }

  const std::string& id() const { return id_; }
  std::filesystem::path run_dir() const { return dir_ / "run"; }
  std::string config() const { return dir_.file("job.toml"); }

  void start(const std::vector<std::string>& sets = {}) {
    std::vector<std::string> argv = {tandem_binary(), "run", config()};
    for (const auto& s : sets) argv.insert(argv.end(), {"--set", s});
    const FileDescriptor fd(::open(dir_.file("out.txt").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    REQUIRE(fd.get() >= 0);
    child_ = spawn_program(argv, fd.get());
  }
  void interrupt() { child_.kill(SIGINT); }  // the user's Ctrl-C
  // The job's exit code, or -1 if it still runs after `limit`.
  int wait(std::chrono::seconds limit) {
    int status = 0;
    if (!child_.wait_for(limit, status)) return -1;
    child_ = Child();
    return status;
  }
  std::string output() const {
    std::ifstream in(dir_.file("out.txt"));
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

  // Polls the control block until `pred(block)` holds.
  template <class Pred>
  bool wait_until(Pred pred, std::chrono::seconds limit) const {
    const auto end = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < end) {
      if (shm::Segment::exists(shm::job_segment_name(id_, shm::Kind::control))) {
        try {
          auto block = shm::ControlBlock::attach(id_, shm::Segment::Access::read_only);
          if (pred(block)) return true;
        } catch (const std::exception&) {  // the job is creating or removing it: look again
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }

  // metrics.jsonl's rows, in order.
  std::vector<nlohmann::json> metrics() const {
    std::vector<nlohmann::json> rows;
    std::ifstream in(run_dir() / "metrics.jsonl");
    for (std::string line; std::getline(in, line);)
      if (!line.empty()) rows.push_back(nlohmann::json::parse(line));
    return rows;
  }
  // The metrics rows of one process ("learner.0", "actor.1"), without its spawn and exit events.
  std::vector<nlohmann::json> metrics_of(const std::string& process) const {
    std::vector<nlohmann::json> out;
    for (auto& r : metrics())
      if (r.value("process", "") == process && !r.contains("event")) out.push_back(r);
    return out;
  }

  std::vector<std::filesystem::path> checkpoints() const {
    std::vector<std::filesystem::path> out;
    if (std::filesystem::exists(run_dir()))
      for (const auto& e : std::filesystem::directory_iterator(run_dir()))
        if (e.path().filename().string().starts_with("ckpt-")) out.push_back(e.path());
    std::sort(out.begin(), out.end());
    return out;
  }

  // Names of this job's segments still in /dev/shm (none, once the job has ended).
  std::vector<std::string> segments_left() const {
    std::vector<std::string> left;
    for (const auto& e : std::filesystem::directory_iterator("/dev/shm"))
      if (e.path().filename().string().find(id_) != std::string::npos) left.push_back(e.path().filename().string());
    return left;
  }

 private:
  TempDir dir_;
  std::string id_;
  Child child_;
};

inline std::string file_bytes(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace tandem::test
