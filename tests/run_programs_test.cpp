// The real programs under the launcher: tandem run + tandem-learner + tandem-actor on a small
// generated dataset (8x8 images, mlp), checking how a job fails and how it resumes.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.hpp"
#include "shm/control_block.hpp"
#include "shm/dataset_cache.hpp"
#include "shm/segment.hpp"
#include "tests/harness.hpp"
#include "tests/tiny_cache.hpp"

extern char** environ;

namespace {

using namespace tandem;
using tandem::test::TinyCache;
using namespace std::chrono_literals;
namespace fs = std::filesystem;


struct Job {
  std::string id = test::unique_name("job");
  fs::path dir = fs::temp_directory_path() / id;
  fs::path config = dir / "job-config.toml";
  fs::path out = dir / "out.txt";
  fs::path program_config = dir / "program.toml";  // the config without [run], as a child reads it
  pid_t pid = -1;

  Job(const TinyCache& cache, std::int64_t steps, std::uint32_t actors) {
    fs::create_directories(dir);
    const std::string text = test::tiny_job_config(
        {.job = id,
         .dataset = cache.name,
         .run_keys = fmt::format("actors = {}\nrun_dir = \"{}\"\nrestart_backoff_s = 0.1", actors, dir.string()),
         .keys = fmt::format("{}supervised.steps = {}", test::kTinyKeys, steps)});
    std::ofstream(config) << text;
    std::ofstream(program_config) << text.substr(text.find("[data]"));
  }
  ~Job() {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  void start(const std::vector<std::string>& extra = {}) {
    std::string cmd = fmt::format("exec '{}' run '{}'", test::tandem_binary(), config.string());
    for (const auto& e : extra) cmd += " " + e;
    cmd += fmt::format(" > '{}' 2>&1", out.string());
    const char* argv[] = {"/bin/sh", "-c", cmd.c_str(), nullptr};
    REQUIRE(::posix_spawn(&pid, "/bin/sh", nullptr, nullptr, const_cast<char**>(argv), environ) == 0);
  }
  int wait(std::chrono::seconds limit) {
    const auto end = std::chrono::steady_clock::now() + limit;
    int status = 0;
    while (std::chrono::steady_clock::now() < end) {
      if (::waitpid(pid, &status, WNOHANG) == pid) {
        pid = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(50ms);
    }
    return -1;  // still running
  }
  std::string output() const {
    std::ifstream in(out);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  // Polls the control block until `pred(block)` holds.
  template <class Pred>
  bool wait_until(Pred pred, std::chrono::seconds limit) {
    const auto end = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < end) {
      if (shm::Segment::exists(shm::job_segment_name(id, shm::Kind::control))) {
        try {
          auto block = shm::ControlBlock::attach(id, shm::Segment::Access::read_only);
          if (pred(block)) return true;
        } catch (const std::exception&) {
        }
      }
      std::this_thread::sleep_for(50ms);
    }
    return false;
  }
  std::int64_t learner_step(const shm::ControlBlock& b) const {
    auto m = b.read_metrics(0);
    return m ? static_cast<std::int64_t>(m->step) : 0;
  }
};

std::vector<fs::path> checkpoints(const fs::path& dir) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().starts_with("ckpt-")) out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

// The "version" of each line of a JSON-lines file that has one, in file order; every line must carry
// "job":"<job>" (a resumed run appends to the same files).
std::vector<std::uint64_t> versions_in(const fs::path& file, const std::string& job) {
  std::ifstream in(file);
  std::vector<std::uint64_t> versions;
  for (std::string line; std::getline(in, line);) {
    INFO(file.filename().string() << ": " << line);
    CHECK(line.find(fmt::format("\"job\":\"{}\"", job)) != std::string::npos);
    if (const auto at = line.find("\"version\":"); at != std::string::npos)
      versions.push_back(std::stoull(line.substr(at + 10)));
  }
  return versions;
}

}  // namespace

TEST_CASE("SIGINT makes the learner checkpoint and exit cleanly, and a resumed run continues from that step" *
          doctest::timeout(90)) {
  TinyCache cache;
  Job job(cache, 1000000, 1);
  job.start();
  REQUIRE(job.wait_until([&](const shm::ControlBlock& b) { return job.learner_step(b) >= 50; }, 40s));
  ::kill(job.pid, SIGINT);
  const int rc = job.wait(30s);
  INFO(job.output());
  CHECK(rc == 130);
  const auto ckpts = checkpoints(job.dir);
  REQUIRE(ckpts.size() == 1);
  const std::string name = ckpts[0].filename().string();  // ckpt-000000001234.safetensors
  const std::int64_t step = std::stoll(name.substr(5, 12));
  CHECK(step >= 50);
  for (const auto& s : shm::list_segments()) CHECK(s.name.find(job.id) == std::string::npos);

  // resume: same run dir, a budget a little past the checkpoint
  job.start({fmt::format("--set supervised.steps={}", step + 40)});
  const int rc2 = job.wait(40s);
  const std::string out = job.output();
  INFO(out);
  CHECK(rc2 == 0);
  CHECK(out.find(fmt::format("at step {}", step)) != std::string::npos);  // "resumed from ... at step N"
  CHECK(out.find(fmt::format("finished at step {}", step + 40)) != std::string::npos);

  // Versions continue across the resume: the evaluations never go backwards, and every row of
  // eval.jsonl and metrics.jsonl names the job.
  const auto evaluated = versions_in(job.dir / "eval.jsonl", job.id);
  CAPTURE(fmt::format("{}", fmt::join(evaluated, ",")));
  REQUIRE(evaluated.size() >= 2);
  CHECK(std::is_sorted(evaluated.begin(), evaluated.end()));
  CHECK(evaluated.back() > evaluated.front());
  const auto sampled = versions_in(job.dir / "metrics.jsonl", job.id);
  CHECK(!sampled.empty());
}

TEST_CASE("an actor SIGKILLed mid-run is restarted and the job still succeeds" * doctest::timeout(90)) {
  TinyCache cache;
  Job job(cache, 1500, 2);
  job.start();
  std::int32_t victim = 0;
  REQUIRE(job.wait_until(
      [&](const shm::ControlBlock& b) {
    auto s = b.snapshot(1);  // actor.0
    victim = s.pid;
    return s.state == shm::ProcessState::running && s.metrics.has_value() && job.learner_step(b) > 0;
      },
      40s));
  REQUIRE(victim > 0);
  ::kill(victim, SIGKILL);
  bool restarted = job.wait_until([&](const shm::ControlBlock& b) { return b.snapshot(1).restarts >= 1; }, 20s);
  const int rc = job.wait(60s);
  INFO(job.output());
  CHECK(restarted);
  CHECK(rc == 0);
}

// Whenever the actor dies near the end (just before the learner finishes, or while the job
// finishes), it is restarted and evaluates the final version: the outcome never hinges on the moment.
TEST_CASE("an actor SIGKILLed as the learner finishes is restarted, evaluates the final version, and the job succeeds" *
          doctest::timeout(90)) {
  TinyCache cache;
  Job job(cache, 1500, 1);
  job.start();
  std::int32_t victim = 0;
  REQUIRE(job.wait_until(
      [&](const shm::ControlBlock& b) {
    auto s = b.snapshot(1);  // actor.0
    victim = s.pid;
    return s.state == shm::ProcessState::running && s.metrics.has_value() && job.learner_step(b) >= 1400;
      },
      60s));
  ::kill(victim, SIGKILL);
  const int rc = job.wait(60s);
  const std::string out = job.output();
  INFO(out);
  CHECK(rc == 0);
  const auto at = out.find("final weights version ");
  REQUIRE(at != std::string::npos);
  const std::uint64_t final_version = std::stoull(out.substr(at + 22));
  const auto evaluated = versions_in(job.dir / "eval.jsonl", job.id);
  REQUIRE(!evaluated.empty());
  CHECK(evaluated.back() == final_version);
}

TEST_CASE("a learner SIGKILLed fails the job within 10 s, naming it, with the job's segments removed" *
          doctest::timeout(90)) {
  TinyCache cache;
  Job job(cache, 1000000, 1);
  job.start();
  std::int32_t learner = 0;
  REQUIRE(job.wait_until(
      [&](const shm::ControlBlock& b) {
    learner = b.snapshot(0).pid;
    return job.learner_step(b) > 0;
      },
      40s));
  ::kill(learner, SIGKILL);
  const auto t0 = std::chrono::steady_clock::now();
  const int rc = job.wait(10s);
  const double took = seconds_since(t0);
  const std::string out = job.output();
  INFO(out);
  CHECK(rc == 1);
  CHECK(took < 10.0);
  CHECK(out.find("learner.0") != std::string::npos);
  CHECK(out.find("has not exited: sending SIGTERM") == std::string::npos);  // the actor stopped on the request
  for (const auto& s : shm::list_segments()) CHECK(s.name.find(job.id) == std::string::npos);
}

TEST_CASE("bad learner and actor config values give a one-line error naming the key" * doctest::timeout(60)) {
  TinyCache cache;
  Job job(cache, 100, 1);
  for (const std::string bad : {"supervised.batch_size=0", "optimizer.name='\"sgdd\"'", "actor.min_interval_s=-1",
                                "supervised.feed='\"gpu\"'"}) {
    const auto r = test::run_command(
        fmt::format("'{}' run '{}' --set {} 2>&1", test::tandem_binary(), job.config.string(), bad));
    INFO(bad << " -> " << r.output);
    CHECK(r.status == 1);
    CHECK(r.output.find(bad.substr(0, bad.find('='))) != std::string::npos);
    CHECK(std::count(r.output.begin(), r.output.end(), '\n') == 1);
  }
  // The learner checks what the schema cannot: a cuda feed on the CPU, a warmup longer than the run.
  const auto r = test::run_command(fmt::format("'{}' '{}' --set schedule.warmup_steps=500 2>&1",
                                               test::required_env("TANDEM_LEARNER"), job.program_config.string()));
  INFO(r.output);
  CHECK(r.status == 1);
  CHECK(r.output.find("schedule.warmup_steps") != std::string::npos);
  CHECK(std::count(r.output.begin(), r.output.end(), '\n') == 1);
}

// One rule, one function: what `tandem run` refuses before anything starts, the program refuses at
// its start with the same line, because both call the settings' own checks (JobSettings::parse,
// shm::attach_job_data, supervised_budget, envs::env_id) rather than copies of them.
TEST_CASE("the launcher and the programs refuse a job with the same line, from the same rule" * doctest::timeout(120)) {
  TinyCache cache;
  Job job(cache, 100, 2);
  const std::string rl = "learner.algo=ppo model.name=actor_critic_mlp actor.role=rollout actor.evaluators=1";
  // env: the variables `tandem run` would give the program, for a job of that shape.
  const std::string two_ranks =
      "WORLD_SIZE=2 RANK=0 LOCAL_RANK=0 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=1";
  struct Row {
    std::string sets;  // space-separated --set values
    std::string program;
    std::string env;
    std::string expect;
  };
  const std::vector<Row> rows = {
      {"supervised.batch_size=100000", "TANDEM_LEARNER", "", "supervised.batch_size = 100000 is larger than split"},
      {"schedule.warmup_steps=500", "TANDEM_LEARNER", "", "schedule.warmup_steps = 500 is not below the run's 100"},
      {"actor.batch_size=1000", "TANDEM_ACTOR", "TANDEM_ACTORS=2", "actor.batch_size = 1000 is larger than split"},
      {"run.learners=2 supervised.batch_size=33", "TANDEM_LEARNER", two_ranks, "does not divide among the 2"},
      {"supervised.feed=device", "TANDEM_LEARNER", "", "supervised.feed = \"device\" needs learner.device"},
      {"actor.role=rollout", "TANDEM_ACTOR", "TANDEM_ACTORS=2", "actor.role = \"rollout\" needs a learner"},
      {"learner.device=gpu", "TANDEM_ACTOR", "TANDEM_ACTORS=2", "learner.device = \"gpu\" is not a device"},
      {rl + " run.learners=2", "TANDEM_LEARNER", two_ranks + " TANDEM_ACTORS=2",
       "rollout actors do not divide among run.learners = 2"},
      {rl + " run.actors=1", "TANDEM_LEARNER", "TANDEM_ACTORS=1", "actor.evaluators = 1 leaves no rollout actor"},
      {rl + " run.actors=1", "TANDEM_ACTOR", "TANDEM_ACTORS=1", "actor.evaluators = 1 leaves no rollout actor"},
      {rl + " env.name=plugin", "TANDEM_ACTOR", "TANDEM_ACTORS=2", "env.name = \"plugin\" but env.plugin is empty"},
      {rl + " env.name=cartpol", "TANDEM_LEARNER", "TANDEM_ACTORS=2", "env.name = \"cartpol\" is not one of"},
      {rl + " env.name=cartpol", "TANDEM_ACTOR", "TANDEM_ACTORS=2", "env.name = \"cartpol\" is not one of"},
  };
  // The message after the program's name: "tandem: config: ..." and "tandem-learner: config: ...".
  auto message = [](const std::string& output) {
    const auto at = output.find(": config: ");
    return at == std::string::npos ? output : output.substr(at + 2);
  };
  for (const Row& row : rows) {
    CAPTURE(row.sets);
    CAPTURE(row.program);
    std::string launcher_sets, program_sets;
    std::istringstream words(row.sets);
    for (std::string set; words >> set;) {
      launcher_sets += " --set " + set;
      if (!set.starts_with("run.")) program_sets += " --set " + set;
    }
    const auto launcher = test::run_command(
        fmt::format("'{}' run '{}'{} 2>&1", test::tandem_binary(), job.config.string(), launcher_sets));
    const auto program = test::run_command(
        fmt::format("cd '{}' && env -u TANDEM_JOB -u TANDEM_ACTORS {} '{}' '{}'{} 2>&1", job.dir.string(), row.env,
                    test::required_env(row.program.c_str()), job.program_config.string(), program_sets));
    INFO(launcher.output);
    INFO(program.output);
    CHECK(launcher.status == 1);
    CHECK(program.status == 1);
    CHECK(message(launcher.output).find(row.expect) != std::string::npos);
    CHECK(message(program.output) == message(launcher.output));
  }
}
