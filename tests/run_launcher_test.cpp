// `tandem run` end to end, with this test binary standing in for the learner and the actors (the
// config points run.learner_program / run.actor_program at it): crashes, hangs, signals, bad configs,
// and never a segment left behind.
#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include "shm/control_block.hpp"
#include "shm/control_client.hpp"
#include "shm/heartbeat_thread.hpp"
#include "tests/harness.hpp"

using namespace tandem;
using namespace std::chrono_literals;
using shm::ControlClient;
using shm::ProcessMetrics;
using shm::ProcessState;
namespace fs = std::filesystem;

namespace {

std::map<std::string, std::string> child_options() {
  std::map<std::string, std::string> out;
  for (const auto& a : test::child_args()) {
    auto eq = a.find('=');
    if (eq != std::string::npos) out[a.substr(0, eq)] = a.substr(eq + 1);
  }
  return out;
}

std::string self_path() { return fs::read_symlink("/proc/self/exe").string(); }

std::vector<std::string> segments_of(const std::string& job) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator("/dev/shm"))
    if (e.path().filename().string().starts_with("tandem." + job + ".")) names.push_back(e.path().filename());
  return names;
}

// `tandem run` as a child of the test, its stdout and stderr collected by a thread.
class Launcher {
 public:
  explicit Launcher(const std::vector<std::string>& args) {
    int fds[2];
    REQUIRE(::pipe(fds) == 0);
    std::vector<std::string> argv_s = {test::tandem_binary(), "run"};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : argv_s) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      ::dup2(fds[1], 1);
      ::dup2(fds[1], 2);
      ::close(fds[0]);
      ::close(fds[1]);
      ::execv(argv[0], argv.data());
      std::_Exit(127);
    }
    ::close(fds[1]);
    reader_ = std::thread([this, fd = fds[0]] {
      char buf[4096];
      for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) {
        std::lock_guard lock(mutex_);
        output_.append(buf, static_cast<std::size_t>(n));
      }
      ::close(fd);
    });
  }
  ~Launcher() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (reader_.joinable()) reader_.join();
  }

  pid_t pid() const { return pid_; }
  std::string output() {
    std::lock_guard lock(mutex_);
    return output_;
  }
  bool wait_for_output(const std::string& text, std::chrono::milliseconds timeout = 20s) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      if (output().find(text) != std::string::npos) return true;
      std::this_thread::sleep_for(10ms);
    }
    return false;
  }
  // Exit status (128 + signal when killed), or -1 on timeout.
  int wait(std::chrono::milliseconds timeout = 60s) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        reader_.join();  // the pipe closes when the launcher and its children are gone
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(10ms);
    }
    return -1;
  }

 private:
  pid_t pid_ = -1;
  std::thread reader_;
  std::mutex mutex_;
  std::string output_;
};

// A job config in a fresh directory, children played by this binary.
struct JobFixture {
  std::string job = test::unique_name("runtest");
  fs::path dir = fs::temp_directory_path() / job;
  std::map<std::string, std::string> keys = {
      {"job", "\"" + job + "\""},
      {"unique_id", "false"},
      {"learners", "1"},
      {"actors", "2"},
      {"learner_program", "\"" + self_path() + "\""},
      {"learner_args", "\"--tandem-child=fake-learner steps=150 step_ms=20\""},
      {"actor_program", "\"" + self_path() + "\""},
      {"actor_args", "\"--tandem-child=fake-actor mode=normal\""},
      {"runs_dir", "\"" + (dir / "runs").string() + "\""},
      {"restart_backoff_s", "0.1"},
      {"heartbeat_timeout_s", "3"},
      {"start_timeout_s", "20"},
      {"stop_timeout_s", "5"},
      {"kill_timeout_s", "2"},
      {"status", "\"plain\""},
      {"status_interval_s", "1"},
      {"metrics_interval_s", "0.2"},
  };
  JobFixture() { fs::create_directories(dir); }
  ~JobFixture() {
    for (const auto& name : segments_of(job)) shm::Segment::unlink(name);
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  fs::path run_dir() const { return dir / "runs" / job; }
  std::string write() const {
    std::string text = "[run]\n";
    for (const auto& [k, v] : keys) text += k + " = " + v + "\n";
    const fs::path file = dir / "job.toml";
    std::ofstream(file) << text;
    return file.string();
  }
  shm::ProcessSnapshot process(const std::string& role, std::uint32_t index) const {
    auto block = shm::ControlBlock::attach(job, shm::Segment::Access::read_only);
    return block.snapshot(block.row_of(*shm::parse_role(role), index));
  }
};

// GET path from 127.0.0.1:port; the whole response, or "" when the connection fails.
std::string http_get(int port, const std::string& path) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string response;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
    const std::string request = "GET " + path + " HTTP/1.0\r\n\r\n";
    if (::write(fd, request.data(), request.size()) == static_cast<ssize_t>(request.size())) {
      char buf[4096];
      for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) response.append(buf, static_cast<std::size_t>(n));
    }
  }
  ::close(fd);
  return response;
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

// ---- the stand-ins ----

// Trains `steps` steps of `step_ms`, reporting metrics; on a stop request it "checkpoints" (writes
// checkpoint.txt into the run directory) and exits 0. It also creates a segment of the job, as the
// weight slab's writer would, to prove the launcher removes what its children made.
TANDEM_CHILD("fake-learner") {
  auto opt = child_options();
  const int steps = std::stoi(opt["steps"]);
  const int step_ms = std::stoi(opt["step_ms"]);
  auto client = ControlClient::from_env();
  if (!client) return 3;
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // the launcher shows lines as they are written
  if (std::getenv("RANK") == nullptr || std::getenv("MASTER_PORT") == nullptr || std::getenv("TANDEM_CONFIG") == nullptr)
    return 4;
  shm::Segment slab = shm::Segment::create(shm::job_segment_name(client->job(), "weights"), shm::Kind::weights, 1,
                                           4096, "fix");
  slab.mark_ready();
  slab.persist();
  shm::HeartbeatThread beat(*client, 50ms);
  client->set_state(ProcessState::running);
  std::printf("learner %s starting\n", client->name().c_str());
  for (int step = 1; step <= steps; ++step) {
    if (client->should_stop()) {
      client->set_state(ProcessState::stopping);
      std::ofstream(fs::path(client->run_dir()) / "checkpoint.txt") << "step " << step << "\n";
      std::printf("stop requested: checkpoint at step %d\n", step);
      return 0;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(step_ms));
    ProcessMetrics m;
    m.step = static_cast<std::uint64_t>(step);
    m.version = static_cast<std::uint64_t>(step / 10);
    m.loss = 1.0 / step;
    m.samples_per_s = 1000.0;
    client->report(m);
    if (step % 10 == 0) std::printf("step %d\n", step);
  }
  std::printf("training done\n");
  return 0;
}

// Evaluates until stopped, beating by hand each loop (so sleeping stops its heartbeat).
// mode=hang-once: its first incarnation stops beating after ~0.5 s; crash: exits 3 after 0.2 s.
TANDEM_CHILD("fake-actor") {
  auto opt = child_options();
  auto client = ControlClient::from_env();
  if (!client) return 3;
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // the launcher shows lines as they are written
  if (std::getenv("RANK") != nullptr) return 4;  // torchrun's variables are for learners only
  client->set_state(ProcessState::running);
  std::printf("actor %u running (restart %u)\n", client->index(), client->restarts());
  for (int i = 0;; ++i) {
    if (client->should_stop()) {
      client->set_state(ProcessState::stopping);
      std::printf("actor stopping\n");
      return 0;
    }
    client->heartbeat();
    if (opt["mode"] == "hang-once" && client->restarts() == 0 && i == 25) {
      std::printf("hanging now\n");
      std::this_thread::sleep_for(1h);
    }
    if (opt["mode"] == "crash" && i == 10) {
      std::fprintf(stderr, "simulated crash\n");
      return 3;
    }
    ProcessMetrics m;
    m.step = static_cast<std::uint64_t>(i);
    m.version = static_cast<std::uint64_t>(i / 5);
    m.accuracy = 0.5 + 0.001 * i;
    m.loss = 0.7;
    client->report(m);
    std::this_thread::sleep_for(20ms);
  }
}

// ---- the launcher ----

TEST_CASE("tandem run: an actor SIGKILLed mid-run is restarted and the job still succeeds" * doctest::timeout(90)) {
  JobFixture f;
  Launcher run({f.write()});
  REQUIRE(run.wait_for_output("[actor.1] actor 1 running (restart 0)"));
  const pid_t victim = f.process("actor", 1).pid;
  REQUIRE(victim > 0);
  ::kill(victim, SIGKILL);
  CHECK(run.wait_for_output("[actor.1] actor 1 running (restart 1)"));
  const int status = run.wait();
  const std::string out = run.output();
  CAPTURE(out);
  CHECK(status == 0);
  CHECK(out.find(fmt::format("actor.1 (pid {}) was killed by SIGKILL: restarting it", victim)) != std::string::npos);
  CHECK(out.find("[learner.0] training done") != std::string::npos);
  CHECK(out.find("succeeded") != std::string::npos);
  CHECK(out.rfind("succeeded") > out.rfind("[actor.1] actor stopping"));  // success is printed last
  CHECK(segments_of(f.job).empty());
  const std::string metrics = read_file(f.run_dir() / "metrics.jsonl");
  CHECK(metrics.find("\"event\":\"spawn\",\"process\":\"actor.1\"") != std::string::npos);
  CHECK(metrics.find("\"restarts\":1") != std::string::npos);
  CHECK(metrics.find("\"process\":\"learner.0\",\"role\":\"learner\",\"step\":") != std::string::npos);
  CHECK(metrics.find("\"accuracy\":") != std::string::npos);
  CHECK(metrics.find("\"outcome\":\"succeeded\"") != std::string::npos);
  CHECK(fs::exists(f.run_dir() / "config.toml"));
  CHECK(read_file(f.run_dir() / "job.toml").find("[run]") == std::string::npos);
}

TEST_CASE("tandem run: a learner SIGKILLed fails the job within 10 s, naming it, with its segments removed" *
          doctest::timeout(90)) {
  JobFixture f;
  f.keys["learner_args"] = "\"--tandem-child=fake-learner steps=100000 step_ms=20\"";
  Launcher run({f.write()});
  REQUIRE(run.wait_for_output("[learner.0] step 20"));
  CHECK(shm::Segment::exists("tandem." + f.job + ".weights"));  // made by the learner
  const pid_t victim = f.process("learner", 0).pid;
  REQUIRE(victim > 0);
  const auto killed_at = std::chrono::steady_clock::now();
  ::kill(victim, SIGKILL);
  const int status = run.wait(30s);
  const auto took = std::chrono::steady_clock::now() - killed_at;
  const std::string out = run.output();
  CAPTURE(out);
  CHECK(status == 1);
  CHECK(took < 10s);
  CHECK(out.find(fmt::format("job {} failed", f.job)) != std::string::npos);
  CHECK(out.find(fmt::format("learner.0 (pid {}) was killed by SIGKILL; its last", victim)) != std::string::npos);
  CHECK(out.find("  | step 20") != std::string::npos);
  CHECK(out.find("succeeded") == std::string::npos);
  CHECK(segments_of(f.job).empty());
}

TEST_CASE("tandem run: SIGINT makes the learner checkpoint and exit, the launcher exit 130, nothing left" *
          doctest::timeout(90)) {
  JobFixture f;
  f.keys["learner_args"] = "\"--tandem-child=fake-learner steps=100000 step_ms=20\"";
  Launcher run({f.write()});
  REQUIRE(run.wait_for_output("[learner.0] step 20"));
  REQUIRE(run.wait_for_output("[actor.1] actor 1 running"));
  ::kill(run.pid(), SIGINT);
  const int status = run.wait(30s);
  const std::string out = run.output();
  CAPTURE(out);
  CHECK(status == 130);
  CHECK(out.find("[learner.0] stop requested: checkpoint at step") != std::string::npos);
  CHECK(out.find("[actor.0] actor stopping") != std::string::npos);
  CHECK(out.find("stopped by SIGINT") != std::string::npos);
  CHECK(out.find("succeeded") == std::string::npos);
  CHECK(read_file(f.run_dir() / "checkpoint.txt").starts_with("step "));
  CHECK(segments_of(f.job).empty());
}

TEST_CASE("tandem run: a hung actor (no heartbeat) is killed and restarted" * doctest::timeout(90)) {
  JobFixture f;
  f.keys["heartbeat_timeout_s"] = "1";
  f.keys["actors"] = "1";
  f.keys["actor_args"] = "\"--tandem-child=fake-actor mode=hang-once\"";
  f.keys["learner_args"] = "\"--tandem-child=fake-learner steps=200 step_ms=20\"";
  Launcher run({f.write()});
  const int status = run.wait();
  const std::string out = run.output();
  CAPTURE(out);
  CHECK(status == 0);
  CHECK(out.find("[actor.0] hanging now") != std::string::npos);
  CHECK(out.find("hung: no heartbeat for") != std::string::npos);
  CHECK(out.find("(run.heartbeat_timeout_s = 1): killing it") != std::string::npos);
  CHECK(out.find("[actor.0] actor 0 running (restart 1)") != std::string::npos);
  CHECK(out.find("succeeded") != std::string::npos);
  CHECK(segments_of(f.job).empty());
}

TEST_CASE("tandem run: an actor that keeps crashing fails the job at the restart limit" * doctest::timeout(90)) {
  JobFixture f;
  f.keys["actors"] = "1";
  f.keys["max_restarts"] = "2";
  f.keys["actor_args"] = "\"--tandem-child=fake-actor mode=crash\"";
  f.keys["learner_args"] = "\"--tandem-child=fake-learner steps=100000 step_ms=20\"";
  Launcher run({f.write()});
  const int status = run.wait();
  const std::string out = run.output();
  CAPTURE(out);
  CHECK(status == 1);
  CHECK(out.find("restart 2 of at most 2") != std::string::npos);
  CHECK(out.find("exited with status 3, and it has been restarted 2 times already (run.max_restarts = 2)") !=
        std::string::npos);
  CHECK(out.find("  | simulated crash") != std::string::npos);
  CHECK(out.find("[learner.0] stop requested: checkpoint at step") != std::string::npos);
  CHECK(segments_of(f.job).empty());
}

TEST_CASE("tandem run: a running job shows in `tandem status` and on the Prometheus endpoint" * doctest::timeout(90)) {
  JobFixture f;
  // A port that is free now (the launcher binds it a moment later).
  int probe = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  REQUIRE(::bind(probe, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  REQUIRE(::getsockname(probe, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  const int port = ntohs(addr.sin_port);
  ::close(probe);
  f.keys["metrics_port"] = std::to_string(port);
  f.keys["learner_args"] = "\"--tandem-child=fake-learner steps=100000 step_ms=20\"";
  Launcher run({f.write()});
  REQUIRE(run.wait_for_output("[learner.0] step 20"));
  REQUIRE(run.wait_for_output("[actor.1] actor 1 running"));
  std::this_thread::sleep_for(200ms);

  auto table = test::run_command(test::tandem_binary() + " status " + f.job);
  CAPTURE(table.output);
  CHECK(table.status == 0);
  CHECK(table.output.find("job " + f.job) != std::string::npos);
  CHECK(table.output.find("learner.0") != std::string::npos);
  CHECK(table.output.find("running") != std::string::npos);
  CHECK(table.output.find("eval acc") != std::string::npos);
  auto all = test::run_command(test::tandem_binary() + " status");
  CHECK(all.output.find("job " + f.job) != std::string::npos);

  const std::string scrape = http_get(port, "/metrics");
  CAPTURE(scrape);
  CHECK(scrape.find("200 OK") != std::string::npos);
  CHECK(scrape.find(fmt::format("tandem_step{{job=\"{}\",process=\"learner.0\",role=\"learner\"}}", f.job)) !=
        std::string::npos);
  CHECK(scrape.find("tandem_accuracy{") != std::string::npos);
  CHECK(scrape.find("tandem_process_up{") != std::string::npos);

  ::kill(run.pid(), SIGTERM);
  CHECK(run.wait(30s) == 143);
  CHECK(segments_of(f.job).empty());
  auto after = test::run_command(test::tandem_binary() + " status " + f.job);
  CHECK(after.status == 1);
  CHECK(after.output.find("does not exist") != std::string::npos);
}

TEST_CASE("tandem run: bad config values are one-line errors naming the key, and nothing is created" *
          doctest::timeout(60)) {
  struct Row {
    std::map<std::string, std::string> keys;  // written into the file
    std::vector<std::string> set;
    std::string expect;
  };
  const std::vector<Row> rows = {
      {{}, {"--set", "run.actors=-1"}, "run.actors = -1 is out of range [0, 4096]"},
      {{{"learners", "\"two\""}}, {}, "run.learners must be an integer"},
      {{{"learner_program", "\"/nonexistent/tandem-learner\""}}, {}, "run.learner_program = \"/nonexistent/tandem-learner\""},
      {{{"actor_program", "\"no-such-program-xyz\""}}, {}, "run.actor_program = \"no-such-program-xyz\" was found neither"},
      {{{"metrics_port", "70000"}}, {}, "run.metrics_port = 70000 is out of range"},
      {{{"actorz", "1"}}, {}, "unknown key 'run.actorz'"},
      {{{"job", "\"bad name!\""}}, {}, "run.job = \"bad name!\" is not a valid job name"},
      {{{"restart_backoff_s", "2"}, {"restart_backoff_max_s", "1"}}, {}, "run.restart_backoff_max_s = 1 is shorter"},
      {{{"status", "\"fancy\""}}, {}, "run.status = \"fancy\" is not one of: auto, live, plain, off"},
      {{}, {"--set", "run.heartbeat_timeout_s=soon"}, "run.heartbeat_timeout_s must be a number"},
  };
  for (const auto& row : rows) {
    JobFixture f;
    for (const auto& [k, v] : row.keys) f.keys[k] = v;
    std::string cmd = test::tandem_binary() + " run " + f.write();
    for (const auto& a : row.set) cmd += " '" + a + "'";
    auto r = test::run_command(cmd);
    CAPTURE(r.output);
    CHECK(r.status == 1);
    CHECK(r.output.find(row.expect) != std::string::npos);
    CHECK(r.output.find('\n') == r.output.size() - 1);  // exactly one line
    CHECK(segments_of(f.job).empty());
    CHECK_FALSE(fs::exists(f.run_dir()));
  }
}

TEST_CASE("tandem run: a metrics port in use is an error naming run.metrics_port, with nothing left behind" *
          doctest::timeout(60)) {
  int holder = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  REQUIRE(::bind(holder, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  REQUIRE(::listen(holder, 1) == 0);
  REQUIRE(::getsockname(holder, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  JobFixture f;
  f.keys["metrics_port"] = std::to_string(ntohs(addr.sin_port));
  auto r = test::run_command(test::tandem_binary() + " run " + f.write());
  ::close(holder);
  CAPTURE(r.output);
  CHECK(r.status == 1);
  CHECK(r.output.find("run.metrics_port") != std::string::npos);
  CHECK(segments_of(f.job).empty());
}

TEST_CASE("tandem run: a learner that ignores the stop request is terminated and the job fails" *
          doctest::timeout(60)) {
  JobFixture f;
  f.keys["actors"] = "0";
  f.keys["stop_timeout_s"] = "1";
  f.keys["kill_timeout_s"] = "1";
  f.keys["learner_program"] = "\"/bin/sh\"";
  // A program that knows nothing of the control block: it never reports running, so no start timeout.
  f.keys["start_timeout_s"] = "0";
  f.keys["learner_args"] = "\"" + (f.dir / "spin.sh").string() + "\"";
  std::ofstream(f.dir / "spin.sh") << "trap '' INT\necho spinning\nwhile true; do sleep 0.05; done\n";
  Launcher run({f.write()});
  REQUIRE(run.wait_for_output("[learner.0] spinning"));
  ::kill(run.pid(), SIGINT);
  const int status = run.wait(30s);
  const std::string out = run.output();
  CAPTURE(out);
  CHECK(status == 1);
  CHECK(out.find("learner.0") != std::string::npos);
  CHECK(out.find("has not exited: sending SIGTERM") != std::string::npos);
  CHECK(out.find("was killed by SIGTERM") != std::string::npos);
  CHECK(segments_of(f.job).empty());
}
