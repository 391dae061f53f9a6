// tandem-bench as a user runs it: through `tandem bench`, which hands everything after `bench` to the
// tandem-bench next to it.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/case_check.hpp"
#include "tests/harness.hpp"

using namespace tandem;

TEST_CASE("tandem bench --help shows tandem-bench's help with its benches" * doctest::timeout(60)) {
  auto r = test::run_command(fmt::format("{} bench --help", test::tandem_binary()));
  INFO(r.output);
  CHECK(r.status == 0);
  CHECK(r.output.find("tandem-bench") != std::string::npos);
  CHECK(r.output.find("feed") != std::string::npos);
  CHECK(r.output.find("publish") != std::string::npos);
}

TEST_CASE("tandem bench passes a bench's own options through to it" * doctest::timeout(60)) {
  auto r = test::run_command(fmt::format("{} bench publish --help", test::tandem_binary()));
  INFO(r.output);
  CHECK(r.status == 0);
  CHECK(r.output.find("--interval-ms") != std::string::npos);
}

TEST_CASE("tandem bench without tandem-bench beside it names the path and how to build it" * doctest::timeout(60)) {
  test::TempDir dir;
  const auto lonely = dir / "tandem";
  std::filesystem::copy_file(test::tandem_binary(), lonely);
  auto r = test::run_command(fmt::format("{} bench --help", lonely.string()));
  INFO(r.output);
  CHECK(r.status != 0);
  CHECK(r.output.find((dir / "tandem-bench").string()) != std::string::npos);
  CHECK(r.output.find("ninja") != std::string::npos);
}

TEST_CASE("bench publish: readers in separate processes verify every version and the JSON line says so" *
          doctest::timeout(120)) {
  test::TempDir dir;
  const std::string json = dir.file("publish.json");
  auto r = test::run_command(
      fmt::format("{} bench publish --cpu --bytes 2M --readers 2 --seconds 1 --verify "
                  "--interval-ms 2 --json {}",
                  test::tandem_binary(), json));
  INFO(r.output);
  CHECK(r.status == 0);
  std::ifstream in(json);
  const auto line = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  REQUIRE(line.is_object());
  CHECK(line.at("torn_reads") == 0);
  CHECK(line.at("not_increasing") == 0);
  CHECK(line.at("reads") > 0);
  CHECK(r.output.find("publish() -> seen by a polling reader") != std::string::npos);
}

TEST_CASE("bench publish: --device-readers without a GPU publisher is one line naming the option, leaving no slab" *
          doctest::timeout(60)) {
  auto r = test::run_command(fmt::format("{} bench publish --cpu --bytes 2M --readers 0 --device-readers 1 --seconds 1",
                                         test::tandem_binary()));
  INFO(r.output);
  CHECK(r.status == 1);
  CHECK(r.output.find("--device-readers 1 needs the publisher on a GPU (--cpu was given)") != std::string::npos);
  CHECK(r.output.find('\n') == r.output.size() - 1);
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm"))
    CHECK(entry.path().filename().string().find("bench-publish") == std::string::npos);
}

TEST_CASE("bench block: the fused BatchNorm-ReLU-pool and the ATen ops, timed for both of the cnn's blocks" *
          doctest::timeout(120)) {
  test::TempDir dir;
  const std::string json = dir.file("block.json");
  auto r = test::run_command(
      fmt::format("{} bench block --batch 4 --steps 3 --warmup 1 --json {}", test::tandem_binary(), json));
  INFO(r.output);
  if (r.output.find("needs LibTorch") != std::string::npos)
    TANDEM_SKIP("a build without LibTorch has no block to time");
  REQUIRE(r.status == 0);
  std::ifstream in(json);
  const auto line = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  REQUIRE(line.is_object());
  int fused = 0, aten = 0;
  for (const auto& row : line.at("results")) {
    CHECK(row.at("train_ms").get<double>() > 0);
    const std::string variant = row.at("variant");
    fused += variant.rfind("fused (", 0) == 0;
    aten += variant.rfind("ATen ops", 0) == 0;
  }
  CHECK(fused >= 2);  // at least the baseline build, for each block
  CHECK(aten == 4);   // channels-last and NCHW, for each block
}

TEST_CASE(
    "bench mujoco: VecEnv on 1 and 2 threads, the bare loop and 2 bare loops at once each report a rate, and "
    "--threads needs 1" *
    doctest::timeout(120)) {
  test::TempDir dir;
  const std::string json = dir.file("mujoco.json");
  auto r = test::run_command(
      fmt::format("{} bench mujoco --tasks Hopper,Ant --envs 4 --threads 2,1 --seconds 0.2 --rounds 1 --json {}",
                  test::tandem_binary(), json));
  INFO(r.output);
  REQUIRE(r.status == 0);
  std::ifstream in(json);
  const auto line = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  REQUIRE(line.is_object());
  for (const char* task : {"Hopper", "Ant"}) {
    CAPTURE(task);
    const auto& row = line.at("tasks").at(task);
    CHECK(row.at("frame_skip") == 4 + (std::string(task) == "Ant"));
    CHECK(row.at("bare").at("steps_per_s").get<double>() > 0);
    CHECK(row.at("vec_env").at("1").at("steps_per_cpu_s").get<double>() > 0);
    CHECK(row.at("vec_env").at("2").at("scaling_vs_1_thread").get<double>() > 0);
    CHECK(row.at("ceiling").at("2").at("steps_per_s").get<double>() > 0);  // the host's own 2 threads
    CHECK_FALSE(row.at("ceiling").contains("1"));
    CHECK(row.contains("overhead_1_thread_per_cpu_s"));
    CHECK(row.at("overhead_1_thread_paired").get<double>() > -0.5);  // a ratio of two CPU times, less 1
  }
  const auto refused = test::run_command(fmt::format("{} bench mujoco --threads 2", test::tandem_binary()));
  CHECK(refused.status == 1);
  CHECK(refused.output.find("--threads must include 1") != std::string::npos);
}
