// `tandem bench rollout` with its CartPole jobs: real `tandem run`s of the learner and rollout actors,
// so this binary is built only where tandem-learner is (a build with LibTorch).
#include <doctest/doctest.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <tuple>

#include "tests/harness.hpp"

using namespace tandem;

namespace {

nlohmann::json json_file(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
}

constexpr const char* kSmallRings = "--envs 64 --steps 16 --slots 2 --seconds 0.3";

}  // namespace

TEST_CASE(
    "bench rollout: the CartPole jobs report PPO's and V-trace's consumed steps/s with their update shapes, "
    "and a solved time-to-solve run" *
    doctest::timeout(120)) {
  test::TempDir dir;
  const std::string json = dir.file("rollout.json");
  auto r = test::run_command(
      fmt::format("{} bench rollout {} --job-steps 32768 --job-envs 8 --job-rollout-steps 32 "
                  "--seeds 1 --json {}",
                  test::tandem_binary(), kSmallRings, json));
  INFO(r.output);
  REQUIRE(r.status == 0);
  const auto line = json_file(json);
  REQUIRE(line.is_object());
  const auto& throughput = line.at("job").at("throughput");
  for (const auto& [algo, epochs, minibatches] : {std::tuple{"ppo", 4, 4}, std::tuple{"vtrace", 1, 1}}) {
    const std::string algo_name = algo;  // clang 14 cannot capture a structured binding (CAPTURE's lambda)
    CAPTURE(algo_name);
    REQUIRE(throughput.contains(algo));
    CHECK(throughput.at(algo).at("update_epochs") == epochs);
    CHECK(throughput.at(algo).at("minibatches") == minibatches);
    CHECK(throughput.at(algo).at("env_steps").get<double>() >= 32768);
    CHECK(throughput.at(algo).at("env_steps_per_s").get<double>() > 0);
  }
  CHECK(line.at("job").at("solve").at("solved_runs") == 1);
  CHECK(line.at("job").at("solve").at("time_to_solve_s").get<double>() > 0);
  CHECK(r.output.find("goal (b) >= 100 k steps/s, ppo") != std::string::npos);
  CHECK(r.output.find("goal (b) >= 100 k steps/s, vtrace") != std::string::npos);
}
