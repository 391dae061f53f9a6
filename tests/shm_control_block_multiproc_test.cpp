// The control block across processes: a child attached from its environment beats, reports and sees
// the stop request; rank 1 gets rank 0's NCCL id; a writer SIGKILLed mid-stream never leaves a torn
// record.
#include <doctest/doctest.h>
#include <signal.h>

#include <cstdlib>
#include <thread>

#include "shm/control_block.hpp"
#include "shm/control_client.hpp"
#include "shm/heartbeat_thread.hpp"
#include "tests/harness.hpp"

using namespace tandem;
using namespace std::chrono_literals;
using shm::ControlBlock;
using shm::ControlClient;
using shm::ProcessMetrics;
using shm::ProcessState;
using shm::Role;

namespace {

ControlBlock make(const std::string& job, std::uint32_t learners, std::uint32_t actors) {
  return ControlBlock::create({.job = job, .learners = learners, .actors = actors, .run_dir = "/tmp"});
}

void set_identity(const std::string& job, const char* role, const char* index) {
  ::setenv("TANDEM_JOB", job.c_str(), 1);
  ::setenv("TANDEM_ROLE", role, 1);
  ::setenv("TANDEM_INDEX", index, 1);
}

template <class Pred>
bool eventually(Pred pred, std::chrono::milliseconds timeout = 30s) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(2ms);
  }
  return pred();
}

}  // namespace

// Runs until stopped: running state, heartbeat thread, a metrics record per loop, then stopping.
TANDEM_CHILD("worker") {
  auto client = ControlClient::from_env();
  if (!client) return 3;
  shm::HeartbeatThread beat(*client, 5ms);
  client->set_state(ProcessState::running);
  std::uint64_t k = 0;
  while (!client->should_stop()) {
    ProcessMetrics m;
    m.step = ++k;
    m.version = k;
    client->report(m);
    client->saw_version(k);
    std::this_thread::sleep_for(1ms);
  }
  client->set_state(ProcessState::stopping);
  return 0;
}

// Writes records as fast as it can; the parent kills it.
TANDEM_CHILD("hammer") {
  auto client = ControlClient::from_env();
  if (!client) return 3;
  for (std::uint64_t k = 1;; ++k) {
    ProcessMetrics m;
    m.step = k;
    m.version = k * 3;
    m.samples = k * 7;
    m.loss = static_cast<double>(k);
    client->report(m);
  }
}

TANDEM_CHILD("rank") {
  auto client = ControlClient::from_env();
  if (!client) return 3;
  if (client->index() == 0) {
    std::array<std::byte, 128> id;
    for (std::size_t i = 0; i < id.size(); ++i) id[i] = static_cast<std::byte>(255 - i);
    client->publish_nccl_id(id);
    return 0;
  }
  auto id = client->wait_nccl_id(10s);
  if (!id) return 4;
  for (std::size_t i = 0; i < id->size(); ++i)
    if ((*id)[i] != static_cast<std::byte>(255 - i)) return 5;
  return 0;
}

TEST_CASE("control block: a child attached from its environment beats, reports, and stops on request" *
          doctest::timeout(120)) {
  const std::string job = test::unique_name("ctlmp");
  ControlBlock block = make(job, 1, 2);
  const std::uint32_t row = block.row_of(Role::actor, 1);
  block.begin_spawn(row, 0);
  set_identity(job, "actor", "1");
  test::Child child = test::spawn_child("worker");
  block.set_pid(row, child.pid());

  REQUIRE(eventually([&] { return block.snapshot(row).state == ProcessState::running; }));
  REQUIRE(eventually([&] {
    auto s = block.snapshot(row);
    return s.metrics && s.metrics->step > 10 && s.version_seen > 10;
  }));
  const auto beat = block.snapshot(row).heartbeat_ns;
  CHECK(eventually([&] { return block.snapshot(row).heartbeat_ns > beat; }));
  CHECK(block.snapshot(row).pid == child.pid());
  CHECK(block.snapshot(0).state == ProcessState::empty);  // nobody touched the other rows

  block.request_stop(shm::StopReason::interrupted);
  int status = -1;
  REQUIRE(child.wait_for(30s, status));
  CHECK(status == 0);
  CHECK(block.snapshot(row).state == ProcessState::stopping);
}

TEST_CASE("control block: rank 1 receives rank 0's NCCL unique id through the block" * doctest::timeout(120)) {
  const std::string job = test::unique_name("ctlmp");
  ControlBlock block = make(job, 2, 0);
  set_identity(job, "learner", "1");
  test::Child rank1 = test::spawn_child("rank");
  // Rank 1 waits first: it has attached (stored its pid in its row) before rank 0 starts.
  REQUIRE(eventually([&] { return block.snapshot(1).pid == rank1.pid(); }));
  set_identity(job, "learner", "0");
  test::Child rank0 = test::spawn_child("rank");
  int s0 = -1, s1 = -1;
  REQUIRE(rank0.wait_for(10s, s0));
  REQUIRE(rank1.wait_for(10s, s1));
  CHECK(s0 == 0);
  CHECK(s1 == 0);
}

TEST_CASE("control block: a writer SIGKILLed mid-stream leaves a whole record or none, never a torn one" *
          doctest::timeout(60)) {
  const std::string job = test::unique_name("ctlmp");
  ControlBlock block = make(job, 1, 0);
  set_identity(job, "learner", "0");
  for (int round = 0; round < 20; ++round) {
    block.begin_spawn(0, static_cast<std::uint32_t>(round));
    test::Child child = test::spawn_child("hammer");
    REQUIRE(eventually([&] { return block.read_metrics(0).has_value(); }));
    std::this_thread::sleep_for(std::chrono::milliseconds(3 + round));
    child.kill(SIGKILL);
    child.wait();
    if (auto m = block.read_metrics(0)) {
      CHECK(m->version == m->step * 3);
      CHECK(m->samples == m->step * 7);
      CHECK(m->loss == static_cast<double>(m->step));
    }
  }
}
