// The control block in one process: layout, row lifecycle, the metrics seqlock, the client's
// environment contract, the heartbeat thread and JobProcess's stall limit. No assertion waits out a
// timed window: threads are awaited on conditions with generous deadlines, and the stall rule is
// driven with explicit times. Cross-process behaviour: shm_control_block_multiproc_test.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "common/clock.hpp"
#include "common/error.hpp"
#include "shm/control_block.hpp"
#include "shm/control_client.hpp"
#include "shm/heartbeat_thread.hpp"
#include "shm/job_process.hpp"
#include "tests/harness.hpp"

using namespace tandem;
using namespace std::chrono_literals;
using shm::ControlBlock;
using shm::ControlClient;
using shm::ProcessMetrics;
using shm::ProcessState;
using shm::Role;

namespace {
using tandem::test::error_of;

ControlBlock make(const std::string& job, std::uint32_t learners = 2, std::uint32_t actors = 3) {
  return ControlBlock::create({.job = job, .learners = learners, .actors = actors, .run_dir = "/tmp/run"});
}

template <class T>
T raw(const ControlBlock& block, std::size_t offset_in_payload) {
  T value;
  std::memcpy(&value, block.segment().payload() + offset_in_payload, sizeof value);
  return value;
}

// A record whose every field is derived from k, so a torn read is detectable.
ProcessMetrics record(std::uint64_t k) {
  ProcessMetrics m;
  m.updated_ns = k + 1;
  m.step = k;
  m.version = k * 3;
  m.samples = k * 7;
  m.epoch = k / 10;
  m.samples_per_s = static_cast<double>(k) * 0.5;
  m.loss = 1.0 / static_cast<double>(k + 1);
  m.accuracy = static_cast<double>(k % 1000) / 1000.0;
  m.seconds = static_cast<double>(k) * 2;
  m.lr = static_cast<double>(k) * 4;
  return m;
}

bool consistent(const ProcessMetrics& m) {
  const std::uint64_t k = m.step;
  const ProcessMetrics e = record(k);
  return m.updated_ns == e.updated_ns && m.version == e.version && m.samples == e.samples && m.epoch == e.epoch &&
         m.samples_per_s == e.samples_per_s && m.loss == e.loss && m.accuracy == e.accuracy && m.seconds == e.seconds &&
         m.lr == e.lr;
}

template <class Pred>
bool eventually(Pred pred, std::chrono::milliseconds timeout = 30s) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(1ms);
  }
  return pred();
}

struct EnvGuard {
  explicit EnvGuard(std::initializer_list<std::pair<const char*, const char*>> vars) {
    for (auto [k, v] : vars) {
      names.push_back(k);
      if (v) ::setenv(k, v, 1);
      else ::unsetenv(k);
    }
  }
  ~EnvGuard() {
    for (auto* k : names) ::unsetenv(k);
  }
  std::vector<const char*> names;
};

}  // namespace

TEST_CASE("control block: the bytes sit where docs/FORMAT.md says") {
  const std::string job = test::unique_name("ctl");
  ControlBlock block = make(job);
  const auto& d = block.descriptor();
  CHECK(block.segment().name() == shm::job_segment_name(job, shm::Kind::control));
  CHECK(block.segment().header().kind == shm::Kind::control);
  CHECK(d.row_count == 5);
  CHECK(d.learner_count == 2);
  CHECK(d.actor_count == 3);
  CHECK(d.row_bytes == 512);
  CHECK(d.rows_offset == 512);
  CHECK(std::string(d.job) == job);
  CHECK(std::string(d.run_dir) == "/tmp/run");
  CHECK(block.segment().payload_size() >= 512 + 5 * 512);

  // Row 3 is actor 1; write through the API, read the raw bytes at the documented offsets.
  block.begin_spawn(3, 2);
  block.set_pid(3, 4242);
  block.write_metrics(3, record(9));
  const std::size_t row3 = 512 + 3 * 512;
  CHECK(raw<std::uint32_t>(block, row3 + 0) == static_cast<std::uint32_t>(Role::actor));
  CHECK(raw<std::uint32_t>(block, row3 + 4) == 1);
  CHECK(raw<std::int32_t>(block, row3 + 8) == 4242);
  CHECK(raw<std::uint32_t>(block, row3 + 12) == static_cast<std::uint32_t>(ProcessState::starting));
  CHECK(raw<std::uint32_t>(block, row3 + 16) == 2);
  CHECK(raw<std::int32_t>(block, row3 + 20) == -1);
  CHECK(raw<std::uint64_t>(block, row3 + 64) % 2 == 0);               // seqlock even: complete
  CHECK(raw<std::uint64_t>(block, row3 + 72 + 8) == 9);               // metrics.step
  CHECK(raw<double>(block, row3 + 72 + 48) == doctest::Approx(0.1));  // metrics.loss = 1/(9+1)

  block.request_stop(shm::StopReason::interrupted);
  CHECK(raw<std::uint32_t>(block, 0) == 1);
  CHECK(raw<std::uint32_t>(block, 4) == static_cast<std::uint32_t>(shm::StopReason::interrupted));
}

TEST_CASE("control block: rows are learners by rank, then actors by index; a wrong index is a one-line error") {
  ControlBlock block = make(test::unique_name("ctl"));
  CHECK(block.row_of(Role::learner, 1) == 1);
  CHECK(block.row_of(Role::actor, 0) == 2);
  CHECK(block.row_of(Role::actor, 2) == 4);
  CHECK(block.snapshot(4).name() == "actor.2");
  CHECK(block.snapshot(1).name() == "learner.1");
  const std::string e = error_of([&] { block.row_of(Role::actor, 3); });
  CHECK(e.find("actor index 3 does not exist") != std::string::npos);
  CHECK(e.find('\n') == std::string::npos);
}

TEST_CASE("control block: a second job with the same id is refused and the first stays intact") {
  const std::string job = test::unique_name("ctl");
  ControlBlock first = make(job);
  const std::string e = error_of([&] { make(job); });
  CHECK(e.find("already exists") != std::string::npos);
  CHECK(e.find("run.job") != std::string::npos);
  CHECK(ControlBlock::attach(job, shm::Segment::Access::read_only).row_count() == 5);
}

TEST_CASE("control block: the segment is removed when the launcher's handle goes away") {
  const std::string job = test::unique_name("ctl");
  { ControlBlock block = make(job); }
  CHECK_FALSE(shm::Segment::exists(shm::job_segment_name(job, shm::Kind::control)));
  const std::string e = error_of([&] { ControlBlock::attach(job, shm::Segment::Access::read_only); });
  CHECK(e.find("does not exist") != std::string::npos);
}

TEST_CASE("control block: a metrics record is never seen torn while another thread rewrites it" *
          doctest::timeout(120)) {
  ControlBlock block = make(test::unique_name("ctl"), 1, 0);
  block.begin_spawn(0, 0);
  CHECK_FALSE(block.read_metrics(0).has_value());  // cleared at spawn: no record yet
  // The writer keeps going until the reader has checked plenty of records, however the two threads
  // are scheduled.
  std::atomic<bool> done{false};
  std::atomic<std::uint64_t> seen{0};
  std::uint64_t last_written = 0;
  std::thread writer([&] {
    for (std::uint64_t k = 0;; ++k) {
      block.write_metrics(0, record(k));
      if (k >= 100'000 && (seen.load(std::memory_order_relaxed) >= 20'000 || k >= 200'000'000)) {
        last_written = k;
        break;
      }
    }
    done = true;
  });
  std::uint64_t last_step = 0, torn = 0, backwards = 0;
  while (!done.load()) {
    if (auto m = block.read_metrics(0)) {
      seen.fetch_add(1, std::memory_order_relaxed);
      if (!consistent(*m)) ++torn;
      if (m->step < last_step) ++backwards;
      last_step = m->step;
    }
  }
  writer.join();
  CHECK(torn == 0);
  CHECK(backwards == 0);
  CHECK(seen.load() >= 20'000);
  REQUIRE(block.read_metrics(0).has_value());
  CHECK(block.read_metrics(0)->step == last_written);
}

TEST_CASE("control block: a writer killed mid-record leaves no record (not a hang) until the row is respawned" *
          doctest::timeout(60)) {
  ControlBlock block = make(test::unique_name("ctl"), 1, 0);
  block.begin_spawn(0, 0);
  block.write_metrics(0, record(5));
  // What a writer killed between its two seqlock stores leaves behind.
  block.row(0).metrics_seq.fetch_add(1);
  auto start = std::chrono::steady_clock::now();
  CHECK_FALSE(block.read_metrics(0).has_value());
  CHECK(std::chrono::steady_clock::now() - start < 30s);  // bounded retries: an answer, not a hang
  block.begin_spawn(0, 1);
  CHECK(block.row(0).metrics_seq.load() % 2 == 0);
  CHECK_FALSE(block.read_metrics(0).has_value());
  block.write_metrics(0, record(6));
  REQUIRE(block.read_metrics(0).has_value());
  CHECK(block.read_metrics(0)->step == 6);
  CHECK(block.snapshot(0).restarts == 1);
}

TEST_CASE("control block: the stop request carries its first reason") {
  ControlBlock block = make(test::unique_name("ctl"));
  CHECK_FALSE(block.stop_requested());
  CHECK(block.stop_reason() == shm::StopReason::none);
  block.request_stop(shm::StopReason::finished);
  block.request_stop(shm::StopReason::failure);
  CHECK(block.stop_requested());
  CHECK(block.stop_reason() == shm::StopReason::finished);
}

TEST_CASE("control client: outside a job it is absent; malformed variables are one-line errors naming them") {
  {
    EnvGuard env({{"TANDEM_JOB", nullptr}});
    CHECK_FALSE(ControlClient::from_env().has_value());
  }
  const std::string job = test::unique_name("ctl");
  ControlBlock block = make(job);
  {
    EnvGuard env({{"TANDEM_JOB", job.c_str()}, {"TANDEM_ROLE", "critic"}, {"TANDEM_INDEX", "0"}});
    CHECK(error_of([] { ControlClient::from_env(); }).find("TANDEM_ROLE='critic'") != std::string::npos);
  }
  {
    EnvGuard env({{"TANDEM_JOB", job.c_str()}, {"TANDEM_ROLE", "actor"}, {"TANDEM_INDEX", "1x"}});
    CHECK(error_of([] { ControlClient::from_env(); }).find("TANDEM_INDEX='1x'") != std::string::npos);
  }
  {
    EnvGuard env({{"TANDEM_JOB", job.c_str()}, {"TANDEM_ROLE", "learner"}, {"TANDEM_INDEX", "7"}});
    CHECK(error_of([] { ControlClient::from_env(); }).find("learner index 7 does not exist") != std::string::npos);
  }
  {
    const std::string missing = test::unique_name("nojob");
    EnvGuard env({{"TANDEM_JOB", missing.c_str()}, {"TANDEM_ROLE", "actor"}, {"TANDEM_INDEX", "0"}});
    const std::string e = error_of([] { ControlClient::from_env(); });
    CHECK(e.find(shm::job_segment_name(missing, shm::Kind::control)) != std::string::npos);
    CHECK(e.find("does not exist") != std::string::npos);
  }
  {
    EnvGuard env({{"TANDEM_JOB", job.c_str()}, {"TANDEM_ROLE", "actor"}, {"TANDEM_INDEX", "2"}});
    auto client = ControlClient::from_env();
    REQUIRE(client.has_value());
    CHECK(client->name() == "actor.2");
    CHECK(client->run_dir() == "/tmp/run");
    CHECK(block.snapshot(4).pid == ::getpid());
  }
}

TEST_CASE("control client: state, version, metrics and stop go through the client's own row") {
  const std::string job = test::unique_name("ctl");
  ControlBlock block = make(job, 1, 1);
  block.begin_spawn(1, 0);
  ControlClient client = ControlClient::attach(job, Role::actor, 0);
  client.set_state(ProcessState::running);
  client.saw_version(12);
  ProcessMetrics m;
  m.version = 12;
  m.accuracy = 0.91;
  client.report(m);
  auto s = block.snapshot(1);
  CHECK(s.state == ProcessState::running);
  CHECK(s.version_seen == 12);
  REQUIRE(s.metrics.has_value());
  CHECK(s.metrics->accuracy == doctest::Approx(0.91));
  CHECK(s.metrics->updated_ns > 0);
  CHECK(std::isnan(s.metrics->loss));
  CHECK_THROWS_AS(client.set_state(ProcessState::exited), std::logic_error);
  CHECK_FALSE(client.should_stop());
  block.request_stop(shm::StopReason::interrupted);
  CHECK(client.should_stop());
}

TEST_CASE("control client: the NCCL id is published once and read back whole") {
  const std::string job = test::unique_name("ctl");
  ControlBlock block = make(job, 2, 0);
  ControlClient rank0 = ControlClient::attach(job, Role::learner, 0);
  ControlClient rank1 = ControlClient::attach(job, Role::learner, 1);
  CHECK_FALSE(rank1.wait_nccl_id(10ms).has_value());
  std::array<std::byte, 128> id;
  for (std::size_t i = 0; i < id.size(); ++i) id[i] = static_cast<std::byte>(i * 3);
  rank0.publish_nccl_id(id);
  auto got = rank1.wait_nccl_id(1s);
  REQUIRE(got.has_value());
  CHECK(*got == id);
  CHECK_THROWS_AS(rank0.publish_nccl_id(id), std::logic_error);
}

TEST_CASE("heartbeat thread: it beats while alive and its destructor wakes and joins it at once" *
          doctest::timeout(60)) {
  const std::string job = test::unique_name("ctl");
  ControlBlock block = make(job, 1, 0);
  ControlClient client = ControlClient::attach(job, Role::learner, 0);
  auto heartbeat = [&] { return block.row(0).heartbeat_ns.load(); };
  {
    shm::HeartbeatThread beat(client, 5ms);
    const auto first = heartbeat();
    CHECK(eventually([&] { return heartbeat() > first; }));
  }
  const auto start = std::chrono::steady_clock::now();
  { shm::HeartbeatThread beat(client, 1h); }
  CHECK(std::chrono::steady_clock::now() - start < 30s);  // not the hour of its period
}

TEST_CASE("heartbeat thread: with a stall limit it beats only within that limit of the last tick" *
          doctest::timeout(60)) {
  const std::string job = test::unique_name("ctl");
  ControlBlock block = make(job, 1, 0);
  ControlClient client = ControlClient::attach(job, Role::learner, 0);
  constexpr std::uint64_t kStallNs = 10'000'000'000;  // 10 s: far beyond any scheduling delay here
  shm::HeartbeatThread stalls(client, 1h, 10s);
  stalls.tick();
  const std::uint64_t now = monotonic_ns();
  CHECK(stalls.beats_at(now));
  CHECK_FALSE(stalls.beats_at(now + kStallNs + 1'000'000));  // no tick for longer than the limit
  CHECK(stalls.beats_at(now + kStallNs - kStallNs / 2));
  shm::HeartbeatThread always(client, 1h);
  CHECK(always.beats_at(now + 100 * kStallNs));
}

TEST_CASE("heartbeat thread: a Busy scope keeps it beating past the stall limit, which counts again from its end" *
          doctest::timeout(60)) {
  const std::string job = test::unique_name("ctl");
  ControlBlock block = make(job, 1, 0);
  ControlClient client = ControlClient::attach(job, Role::learner, 0);
  constexpr std::uint64_t kStallNs = 10'000'000'000;
  shm::HeartbeatThread stalls(client, 1h, 10s);
  stalls.tick();
  const std::uint64_t now = monotonic_ns();
  CHECK_FALSE(stalls.beats_at(now + kStallNs + 1'000'000));
  {
    const shm::HeartbeatThread::Busy outer(&stalls);
    {
      const shm::HeartbeatThread::Busy inner(&stalls);  // scopes nest
    }
    CHECK(stalls.beats_at(now + 100 * kStallNs));
  }
  const std::uint64_t end = monotonic_ns();
  CHECK(stalls.beats_at(end + kStallNs / 2));  // the scope's end was a tick
  CHECK_FALSE(stalls.beats_at(end + kStallNs + 1'000'000));
}

// A learner's checkpoint is one call inside one step (learner/runtime.cpp holds busy() around it).
TEST_CASE("job process: a step longer than the stall limit spent in busy() (a checkpoint) keeps the heartbeat" *
          doctest::timeout(60)) {
  const std::string job = test::unique_name("ctl");
  ControlBlock block = make(job, 1, 0);
  ::setenv("TANDEM_JOB", job.c_str(), 1);
  ::setenv("TANDEM_ROLE", "learner", 1);
  ::setenv("TANDEM_INDEX", "0", 1);
  constexpr std::uint64_t kStallNs = 200'000'000;
  shm::JobProcess process("learner", 200ms);
  for (const char* name : {"TANDEM_JOB", "TANDEM_ROLE", "TANDEM_INDEX"}) ::unsetenv(name);
  REQUIRE(process.heartbeat() != nullptr);
  process.tick();
  const std::uint64_t t0 = monotonic_ns();
  CHECK_FALSE(process.heartbeat()->beats_at(t0 + kStallNs + 1'000'000));  // a loop that stopped ticking: hung
  {
    const auto checkpoint = process.busy();
    // Without ticking, the heartbeat thread (every 500 ms) beats well past the stall limit.
    CHECK(eventually([&] { return block.row(0).heartbeat_ns.load() > t0 + 5 * kStallNs; }));
  }
  CHECK(process.heartbeat()->beats_at(monotonic_ns() + kStallNs / 2));
}
