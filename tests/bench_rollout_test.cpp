// `tandem bench rollout` as a user runs it: the null-env ring figure and its JSON line, a job that
// fails, a bad option, and the Python peers; nothing left in /dev/shm or the temporary directory.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <nlohmann/json.hpp>

#include "tests/harness.hpp"

using namespace tandem;

namespace {

// The bench's segments: /dev/shm/tandem.rollout-bench-<pid>.exp for the rings, tandem.rollout-bench-<id>.* for its
// job. Segments of that name already there when the test binary starts (a run killed with the machine, say) are not
// this test's to judge, so only the ones that appear after are counted.
std::set<std::string> bench_segment_names() {
  std::set<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm"))
    if (auto name = entry.path().filename().string(); name.starts_with("tandem.rollout-bench-")) names.insert(name);
  return names;
}

const std::set<std::string> segments_before_the_tests = bench_segment_names();

int ring_bench_segments() {
  int count = 0;
  for (const auto& name : bench_segment_names()) count += !segments_before_the_tests.contains(name);
  return count;
}

nlohmann::json json_file(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
}

constexpr const char* kSmallRings = "--envs 64 --steps 16 --slots 2 --seconds 0.3";

}  // namespace

TEST_CASE("bench rollout: null envs through the rings give a per-core figure, no refused slot, and a JSON line" *
          doctest::timeout(60)) {
  test::TempDir dir;
  const std::string json = dir.file("rollout.json");
  auto r = test::run_command(
      fmt::format("{} bench rollout --no-job {} --actors 2 --json {}", test::tandem_binary(), kSmallRings, json));
  INFO(r.output);
  CHECK(r.status == 0);
  CHECK(r.output.find("steps/s per actor core") != std::string::npos);
  const auto line = json_file(json);
  REQUIRE(line.is_object());
  CHECK(line.at("bench") == "rollout");
  const auto& rings = line.at("rings");
  CHECK(rings.at("refused") == 0);
  CHECK(rings.at("slots_consumed").get<int>() > 0);
  CHECK(rings.at("steps_per_s_per_actor_core").get<double>() > 0);
  CHECK(rings.at("actors") == 2);
  CHECK_FALSE(line.contains("job"));
  CHECK(ring_bench_segments() == 0);
}

TEST_CASE("bench rollout: an out-of-range option is one line naming it, and no segment is created" *
          doctest::timeout(60)) {
  auto r = test::run_command(fmt::format("{} bench rollout --no-job --slots 1", test::tandem_binary()));
  INFO(r.output);
  CHECK(r.status > 0);
  CHECK(r.status < 126);
  CHECK(r.output.find("--slots 1 is out of range") != std::string::npos);
  CHECK(ring_bench_segments() == 0);
}

TEST_CASE("bench rollout: Ctrl-C while the rings run leaves no segment in /dev/shm" * doctest::timeout(60)) {
  auto bench = test::spawn_program({test::tandem_binary(), "bench", "rollout", "--no-job", "--seconds", "50"});
  // Interrupt once its ring segment exists (polled: how long it takes to appear is not what is tested).
  while (ring_bench_segments() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  bench.kill(SIGINT);
  CHECK(bench.wait() == 128 + SIGINT);
  CHECK(ring_bench_segments() == 0);
}

TEST_CASE("bench rollout: a CartPole job that fails makes the bench fail naming the job, and leaves no run dir" *
          doctest::timeout(60)) {
  test::TempDir tmp;  // the bench's scratch directory (run dirs, logs) goes under TMPDIR
  auto r = test::run_command(fmt::format("TMPDIR={} {} bench rollout {} --tandem /bin/false", tmp.path().string(),
                                         test::tandem_binary(), kSmallRings));
  INFO(r.output);
  CHECK(r.status > 0);
  CHECK(r.status < 126);
  CHECK(r.output.find("the CartPole ppo throughput job failed") != std::string::npos);
  CHECK(r.output.find("succeeded") == std::string::npos);
  CHECK(std::filesystem::is_empty(tmp.path()));
  CHECK(ring_bench_segments() == 0);
}

TEST_CASE("bench rollout --peer: both Python peers run the CartPole recipe and report steps/s in the JSON line" *
          doctest::timeout(240)) {
  test::TempDir dir;
  const std::string json = dir.file("rollout.json");
  // A python3 with torch: the tests' numpy Python (Debian's, with python3-torch, here).
  auto r = test::run_command(fmt::format("{} bench rollout --no-job {} --peer --peer-steps 1024 --python {} --json {}",
                                         test::tandem_binary(), kSmallRings, test::python_with_numpy(), json));
  INFO(r.output);
  REQUIRE(r.status == 0);
  const auto line = json_file(json);
  REQUIRE(line.is_object());
  for (const char* peer : {"cleanrl_ppo_peer", "mp_actor_learner_peer"}) {
    CAPTURE(peer);
    REQUIRE(line.contains(peer));
    CHECK(line.at(peer).at("env_steps").get<int>() >= 1024);
    CHECK(line.at(peer).at("env_steps_per_s").get<double>() > 0);
    CHECK(line.at(peer).at("solved") == false);  // 1024 steps never solve CartPole
  }
}
