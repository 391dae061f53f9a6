// A dead, hung or missing data-parallel rank never hangs the others: they exit non-zero within the
// bounds the config sets, with one line that names the step or the missing rank.
#include "tests/torch_doctest.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <fmt/format.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <tuple>
#include <vector>

#include "common/clock.hpp"
#include "common/file_descriptor.hpp"
#include "shm/segment.hpp"
#include "tests/ddp_rank_child.hpp"
#include "tests/harness.hpp"

using namespace tandem::test;
using Clock = std::chrono::steady_clock;

namespace {

// A rank of this test binary with its stdout and stderr in `log`.
Child spawn_rank(const RankRun& run, const std::string& log) {
  const tandem::FileDescriptor fd(::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600));
  REQUIRE(fd.get() >= 0);
  std::vector<std::string> argv = {std::filesystem::read_symlink("/proc/self/exe").string(), "--tandem-child=ddp-rank"};
  for (const std::string& a : rank_args(run)) argv.push_back(a);
  Child c = spawn_program(argv, fd.get());
  return c;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Waits until `path` exists (the rank trained a step), or the rank exited (a failure to report).
void wait_for_file(const std::string& path, Child& rank) {
  int status = 0;
  while (!std::filesystem::exists(path))
    if (rank.wait_for(std::chrono::milliseconds(20), status))
      FAIL("the rank exited (" << status << ") before its first step");
}

// Exit status of `rank` and the seconds it took, failing past `limit_s`.
std::pair<int, double> exit_within(Child& rank, double limit_s) {
  const auto t0 = Clock::now();
  int status = -1;
  const bool exited = rank.wait_for(std::chrono::milliseconds(static_cast<int>(limit_s * 1000)), status);
  const double took = tandem::seconds_since(t0);
  REQUIRE_MESSAGE(exited, "the rank was still running after " << limit_s << " s");
  return {status, took};
}

RankRun endless(int world, int rank, int port, double collective_s, double rendezvous_s, const TempDir& dir,
                const std::string& collectives = "shm") {
  return {.world = world,
          .rank = rank,
          .port = port,
          .batch = 8,
          .steps = 1000000,
          .collectives = collectives,
          .collective_timeout_s = collective_s,
          .rendezvous_timeout_s = rendezvous_s,
          .out = "",
          .marker = dir.file(fmt::format("trained-{}", rank))};
}

// What the job of `port` left in /dev/shm.
std::vector<std::string> job_leftovers(int port) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm"))
    if (entry.path().filename().string().starts_with(tandem::shm::job_segment_prefix(job_of(port))))
      names.push_back(entry.path().filename().string());
  return names;
}

struct Fault {
  int status = -1;                     // rank 0's exit status
  double took = 0;                     // seconds from the signal to rank 0's exit
  std::string log;                     // rank 0's output
  std::vector<std::string> leftovers;  // of the job in /dev/shm once both ranks are gone
};

// Two endless ranks over `collectives`; once rank 1 has trained a step it gets `sig`, and rank 0 must
// exit within `limit_s` of it. Rank 1 is killed and reaped before the leftovers are listed.
Fault signal_rank_1_mid_run(const std::string& collectives, int sig, double collective_s, double limit_s) {
  TempDir dir;
  const int port = free_loopback_port();
  Fault f;
  {
    Child r0 = spawn_rank(endless(2, 0, port, collective_s, 30, dir, collectives), dir.file("r0.log"));
    Child r1 = spawn_rank(endless(2, 1, port, collective_s, 30, dir, collectives), dir.file("r1.log"));
    wait_for_file(dir.file("trained-1"), r1);
    r1.kill(sig);
    std::tie(f.status, f.took) = exit_within(r0, limit_s);
    f.log = slurp(dir.file("r0.log"));
    r1.kill(SIGKILL);  // a stopped process takes SIGKILL too; ~Child reaps it
  }
  f.leftovers = job_leftovers(port);
  return f;
}

}  // namespace

TEST_CASE(
    "data-parallel fault: SIGKILL of rank 1 mid-run makes rank 0 exit non-zero within 10 s naming its peer, "
    "over shared memory and over Gloo" *
    doctest::timeout(120)) {
  for (const std::string collectives : {"shm-caller", "shm-thread", "gloo"}) {
    CAPTURE(collectives);
    const Fault f = signal_rank_1_mid_run(collectives, SIGKILL, 5, 10);
    INFO(f.log);
    MESSAGE(collectives << ": rank 0 exited " << f.status << " " << f.took << " s after rank 1 was killed");
    CHECK(f.status != 0);
    CHECK(f.status < 126);
    CHECK(f.log.find("other rank(s) 1") != std::string::npos);
    CHECK(f.leftovers.empty());
  }
}

TEST_CASE(
    "data-parallel fault: SIGSTOP of rank 1 makes rank 0 exit non-zero within the collective timeout + 10 s, "
    "over shared memory and over Gloo" *
    doctest::timeout(120)) {
  for (const std::string collectives : {"shm-caller", "shm-thread", "gloo"}) {
    CAPTURE(collectives);
    const double collective_s = 3;
    const Fault f = signal_rank_1_mid_run(collectives, SIGSTOP, collective_s, collective_s + 10);
    INFO(f.log);
    MESSAGE(collectives << ": rank 0 exited " << f.status << " " << f.took << " s after rank 1 was stopped");
    CHECK(f.status != 0);
    CHECK(f.status < 126);
    CHECK(f.log.find("rank 0: step") != std::string::npos);
    CHECK(f.leftovers.empty());
  }
}

TEST_CASE(
    "data-parallel fault: a rank that never starts makes every started rank exit within the rendezvous timeout + 5 s naming it" *
    doctest::timeout(90)) {
  TempDir dir;
  const int port = free_loopback_port();
  const double rendezvous_s = 3;
  Child r0 = spawn_rank(endless(3, 0, port, 5, rendezvous_s, dir), dir.file("r0.log"));
  Child r1 = spawn_rank(endless(3, 1, port, 5, rendezvous_s, dir), dir.file("r1.log"));
  const auto [s0, t0] = exit_within(r0, rendezvous_s + 5);
  const auto [s1, t1] = exit_within(r1, rendezvous_s + 5);
  const std::string log0 = slurp(dir.file("r0.log")), log1 = slurp(dir.file("r1.log"));
  INFO(log0 << log1);
  CHECK(s0 != 0);
  CHECK(s1 != 0);
  CHECK(log0.find("rank(s) 2") != std::string::npos);
  CHECK(log1.find("rank(s) 2") != std::string::npos);
  CHECK(std::filesystem::exists(dir.file("trained-0")) == false);
}

TEST_CASE(
    "data-parallel fault: when rank 0 (the store) never starts, rank 1 exits within the rendezvous timeout + 5 s naming rank 0" *
    doctest::timeout(60)) {
  TempDir dir;
  const double rendezvous_s = 3;
  Child r1 = spawn_rank(endless(2, 1, free_loopback_port(), 5, rendezvous_s, dir), dir.file("r1.log"));
  const auto [status, took] = exit_within(r1, rendezvous_s + 5);
  const std::string log = slurp(dir.file("r1.log"));
  INFO(log);
  CHECK(status != 0);
  CHECK(log.find("rank 0 never arrived") != std::string::npos);
}
