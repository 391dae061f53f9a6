// `tandem run` starting data-parallel learner ranks: torchrun's variables for one node or node K of
// M, one free MASTER_PORT the ranks really rendezvous on, the multi-node flags checked before
// anything starts, and a rank that dies or hangs failing the job under its own name. The ranks are
// played by this binary ("fake-rank"), which rendezvouses over plain TCP the way c10d's store does:
// rank 0 listens on MASTER_ADDR:MASTER_PORT and every other rank connects to it.
#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "common/file_descriptor.hpp"
#include "shm/control_client.hpp"
#include "shm/heartbeat_thread.hpp"
#include "tests/run_launcher_fixture.hpp"

using namespace tandem;
using namespace tandem::test;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

int env_int(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : -1;
}

sockaddr_in master_address() {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(env_int("MASTER_PORT")));
  ::inet_pton(AF_INET, std::getenv("MASTER_ADDR"), &addr.sin_addr);
  return addr;
}

// Rank 0: listens on the master port and accepts every other rank, each sending its rank as one byte.
// Returns the connections, or an empty vector when the port cannot be had or a rank does not come.
std::vector<int> host_rendezvous(int world) {
  const FileDescriptor fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  const int one = 1;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr = master_address();
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(fd.get(), 64) != 0) return {};
  std::vector<int> peers;
  while (static_cast<int>(peers.size()) < world - 1) {
    pollfd p{fd.get(), POLLIN, 0};
    if (::poll(&p, 1, 10'000) != 1) return {};
    peers.push_back(::accept4(fd.get(), nullptr, nullptr, SOCK_CLOEXEC));
    char rank = 0;
    if (::read(peers.back(), &rank, 1) != 1) return {};
  }
  return peers;
}

int join_rendezvous(int rank) {
  for (int attempt = 0; attempt < 200; ++attempt) {
    FileDescriptor fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in addr = master_address();
    if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
      const char r = static_cast<char>(rank);
      if (::write(fd.get(), &r, 1) == 1) return fd.release();
    }
    std::this_thread::sleep_for(50ms);
  }
  return -1;
}

// Rank 0's view of its other ranks, like Gloo's: a connection closed before the peer said it was done
// (a 'd') means the peer died, and this rank fails at once with an error of its own.
bool lost_a_peer(const std::vector<int>& peers, std::vector<bool>& done, int wait_ms) {
  std::vector<pollfd> fds;
  fds.reserve(peers.size());
  for (int fd : peers) fds.push_back({fd, POLLIN, 0});
  if (::poll(fds.data(), fds.size(), wait_ms) <= 0) return false;
  for (std::size_t i = 0; i < fds.size(); ++i) {
    if (done[i] || fds[i].revents == 0) continue;
    char c = 0;
    if (::read(peers[i], &c, 1) != 1) return true;
    done[i] = c == 'd';
  }
  return false;
}

}  // namespace

// mode=print: prints its variables and exits. Otherwise rendezvouses, trains `steps` steps of
// `step_ms` with a heartbeat, and finishes together with its other ranks (or stops on a stop request).
TANDEM_CHILD("fake-rank") {
  auto opt = child_options();
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  const int rank = env_int("RANK"), world = env_int("WORLD_SIZE");
  std::printf("rank %d/%d local %d/%d node %d/%d master %s:%d\n", rank, world, env_int("LOCAL_RANK"),
              env_int("LOCAL_WORLD_SIZE"), env_int("GROUP_RANK"), env_int("GROUP_WORLD_SIZE"),
              std::getenv("MASTER_ADDR"), env_int("MASTER_PORT"));
  if (opt["mode"] == "print") return 0;
  auto client = shm::ControlClient::from_env();
  if (!client) return 3;
  std::vector<int> peers;
  int to_master = -1;
  if (rank == 0) {
    peers = host_rendezvous(world);
    if (static_cast<int>(peers.size()) != world - 1) {
      std::printf("cannot host the rendezvous on MASTER_PORT\n");
      return 5;
    }
  } else if ((to_master = join_rendezvous(rank)) < 0) {
    std::printf("cannot reach rank 0 at MASTER_ADDR:MASTER_PORT\n");
    return 5;
  }
  std::printf("rendezvous complete: %d ranks\n", world);
  shm::HeartbeatThread beat(*client, 50ms);
  client->set_state(shm::ProcessState::running);
  std::vector<bool> done(peers.size(), false);
  const int steps = std::stoi(opt["steps"]), step_ms = std::stoi(opt["step_ms"]);
  for (int step = 1; step <= steps && !client->should_stop(); ++step) {
    if (rank == 0 ? lost_a_peer(peers, done, step_ms)
                  : (std::this_thread::sleep_for(std::chrono::milliseconds(step_ms)), false)) {
      std::printf("lost another rank: failing\n");
      return 1;
    }
    shm::ProcessMetrics m;
    m.step = static_cast<std::uint64_t>(step);
    client->report(m);
    if (step % 10 == 0) std::printf("step %d\n", step);
  }
  if (to_master >= 0) return ::write(to_master, "d", 1) == 1 ? 0 : 6;
  for (int i = 0; i < 100; ++i) {
    if (std::all_of(done.begin(), done.end(), [](bool d) { return d; })) return 0;
    if (lost_a_peer(peers, done, 100)) {
      std::printf("lost another rank: failing\n");
      return 1;
    }
  }
  return 7;
}

namespace {

void use_fake_ranks(JobFixture& f, const std::string& args) {
  f.keys["learners"] = "2";
  f.keys["actors"] = "0";
  f.keys["learner_args"] = fmt::format("\"--tandem-child=fake-rank {}\"", args);
}

}  // namespace

TEST_CASE("tandem run: two learner ranks get torchrun's variables and one free MASTER_PORT they rendezvous on" *
          doctest::timeout(60)) {
  JobFixture f;
  use_fake_ranks(f, "steps=20 step_ms=20");
  Launcher run({f.write()});
  const int status = run.wait();
  const std::string out = run.output();
  CAPTURE(out);
  CHECK(status == 0);
  CHECK(out.find("[learner.0] rank 0/2 local 0/2 node 0/1 master 127.0.0.1:") != std::string::npos);
  CHECK(out.find("[learner.1] rank 1/2 local 1/2 node 0/1 master 127.0.0.1:") != std::string::npos);
  CHECK(out.find("[learner.0] rendezvous complete: 2 ranks") != std::string::npos);
  CHECK(out.find("[learner.1] rendezvous complete: 2 ranks") != std::string::npos);
  CHECK(out.find("succeeded") != std::string::npos);
  CHECK(segments_of(f.job).empty());
}

TEST_CASE("tandem run --nnodes 2 --node-rank 1: node 1's ranks are 2 and 3 of 4, with node 0's address and port" *
          doctest::timeout(60)) {
  JobFixture f;
  use_fake_ranks(f, "mode=print");
  const int port = free_loopback_port();
  Launcher run({f.write(), "--nnodes", "2", "--node-rank", "1", "--master-addr", "localhost", "--master-port",
                std::to_string(port)});
  const int status = run.wait();
  const std::string out = run.output();
  CAPTURE(out);
  CHECK(status == 0);
  CHECK(out.find(fmt::format("node 1 of 2: ranks 2..3 of 4, rendezvous at localhost:{}", port)) != std::string::npos);
  CHECK(out.find(fmt::format("[learner.0] rank 2/4 local 0/2 node 1/2 master localhost:{}", port)) !=
        std::string::npos);
  CHECK(out.find(fmt::format("[learner.1] rank 3/4 local 1/2 node 1/2 master localhost:{}", port)) !=
        std::string::npos);
  CHECK(segments_of(f.job).empty());
}

TEST_CASE(
    "tandem run: a learner rank SIGKILLed mid-run fails the job within 10 s naming it with its last lines, "
    "though its peer exits with an error first" *
    doctest::timeout(60)) {
  JobFixture f;
  use_fake_ranks(f, "steps=2000 step_ms=20");
  f.keys.erase("kill_timeout_s");  // the defaults: the 10 s hold with them
  f.keys.erase("stop_timeout_s");
  Launcher run({f.write()});
  REQUIRE(run.wait_for_output("[learner.1] step 10"));
  const pid_t victim = f.process("learner", 1).pid;
  REQUIRE(victim > 0);
  const auto killed = std::chrono::steady_clock::now();
  ::kill(victim, SIGKILL);
  const int status = run.wait(20s);
  const auto took = std::chrono::steady_clock::now() - killed;
  const std::string out = run.output();
  CAPTURE(out);
  CHECK(status == 1);
  CHECK(took < 10s);
  CHECK(out.find("[learner.0] lost another rank: failing") != std::string::npos);
  CHECK(out.find(fmt::format("failed after")) != std::string::npos);
  CHECK(out.find(fmt::format("learner.1 (pid {}) was killed by SIGKILL; its last", victim)) != std::string::npos);
  CHECK(out.find("  | step 10") != std::string::npos);
  CHECK(segments_of(f.job).empty());
}

TEST_CASE(
    "tandem run: a learner rank stopped by SIGSTOP is killed as hung before its peers' collectives time out, "
    "and the job fails naming it" *
    doctest::timeout(60)) {
  JobFixture f;
  use_fake_ranks(f, "steps=2000 step_ms=20");
  f.keys["heartbeat_timeout_s"] = "30";
  Launcher run({f.write(), "--set", "ddp.collective_timeout_s=4"});
  REQUIRE(run.wait_for_output("[learner.1] step 10"));
  const pid_t victim = f.process("learner", 1).pid;
  REQUIRE(victim > 0);
  const auto stopped = std::chrono::steady_clock::now();
  ::kill(victim, SIGSTOP);
  const int status = run.wait(30s);
  const auto took = std::chrono::steady_clock::now() - stopped;
  const std::string out = run.output();
  CAPTURE(out);
  CHECK(status == 1);
  CHECK(took < 4s + 10s);
  CHECK(out.find(fmt::format("learner.1 (pid {}) hung: no heartbeat for", victim)) != std::string::npos);
  CHECK(out.find("(learner ranks: half of ddp.collective_timeout_s = 4): killing it") != std::string::npos);
  CHECK(out.find(fmt::format("failed after")) != std::string::npos);
  CHECK(out.rfind(fmt::format("learner.1 (pid {}) hung", victim)) > out.find("failed after"));
  CHECK(segments_of(f.job).empty());
}

TEST_CASE("tandem run: bad multi-node flags are one line naming the flag, exit 1, and leave nothing behind" *
          doctest::timeout(60)) {
  // A port rank 0 could not listen on: something listens there already.
  const FileDescriptor busy(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  REQUIRE(::bind(busy.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  REQUIRE(::listen(busy.get(), 1) == 0);
  REQUIRE(::getsockname(busy.get(), reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  const std::string busy_port = std::to_string(ntohs(addr.sin_port));
  struct Case {
    std::vector<std::string> flags;
    std::string says;
  };
  const std::vector<Case> cases = {
      {{"--nnodes", "0"}, "--nnodes 0 is out of range: use 1..4096"},
      {{"--nnodes", "2", "--node-rank", "2", "--master-addr", "127.0.0.1", "--master-port", "29400"},
       "--node-rank 2 is not below --nnodes 2: number the nodes 0..1"},
      {{"--nnodes", "2", "--node-rank", "1", "--master-port", "29400"}, "--nnodes 2 needs --master-addr HOST"},
      {{"--nnodes", "2", "--node-rank", "1", "--master-addr", "127.0.0.1"}, "--nnodes 2 needs --master-port PORT"},
      {{"--master-port", "70000"}, "--master-port 70000 is not a TCP port: use 1..65535"},
      {{"--master-port", "0"}, "--master-port 0 is not a TCP port"},
      {{"--nnodes", "2", "--master-addr", "no-such-host.invalid", "--master-port", "29400"},
       "master address \"no-such-host.invalid\" (--master-addr or run.master_addr) does not resolve"},
      {{"--master-addr", "bad host"}, "--master-addr \"bad host\" is not a host name or address"},
      {{"--nnodes", "2", "--master-addr", "127.0.0.1", "--master-port", busy_port},
       fmt::format("master port {} (--master-port or run.master_port) is in use on this host", busy_port)},
  };
  for (const auto& c : cases) {
    JobFixture f;
    use_fake_ranks(f, "mode=print");
    std::vector<std::string> args = {f.write()};
    args.insert(args.end(), c.flags.begin(), c.flags.end());
    Launcher run(args);
    const int status = run.wait();
    const std::string out = run.output();
    CAPTURE(out);
    CHECK(status == 1);
    CHECK(out.find(c.says) != std::string::npos);
    CHECK(std::count(out.begin(), out.end(), '\n') == 1);
    CHECK(!fs::exists(f.dir / "runs"));
    CHECK(segments_of(f.job).empty());
  }
}
