// `tandem bench ddp` as a user runs it: the learner ranks through `tandem run`, measured from their
// metrics, on a small generated cache (the cnn on 1x8x8 images), and its bad inputs.
#include <doctest/doctest.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "shm/dataset_cache.hpp"
#include "shm/segment.hpp"
#include "tests/harness.hpp"

using namespace tandem;

namespace {

// The last line of `output` that parses as a JSON object.
nlohmann::json json_line(const std::string& output) {
  nlohmann::json found;
  std::size_t begin = 0;
  while (begin < output.size()) {
    const std::size_t end = output.find('\n', begin);
    const std::string line = output.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
    if (line.starts_with('{')) {
      auto parsed = nlohmann::json::parse(line, nullptr, false);
      if (parsed.is_object()) found = std::move(parsed);
    }
    if (end == std::string::npos) break;
    begin = end + 1;
  }
  return found;
}

struct SmallCache {
  std::string name = test::unique_name("ddpbench");
  SmallCache() {
    const std::uint64_t n = 4096;
    auto w = shm::DatasetWriter::create({.name = name,
                                         .source = "generated",
                                         .format = "test",
                                         .num_samples = n,
                                         .fields = {{"x", shm::DType::u8, {1, 8, 8}}, {"y", shm::DType::i64, {}}},
                                         .splits = {{"train", 0, n - 1024}, {"test", n - 1024, n}}},
                                        false);
    auto* x = reinterpret_cast<std::uint8_t*>(w.field_data(0));
    auto* y = reinterpret_cast<std::int64_t*>(w.field_data(1));
    for (std::uint64_t i = 0; i < n * 64; ++i) x[i] = static_cast<std::uint8_t>(i * 37 % 251);
    for (std::uint64_t i = 0; i < n; ++i) y[i] = static_cast<std::int64_t>(i % 10);
    w.commit(0, 1);
  }
  ~SmallCache() { shm::Segment::unlink(shm::dataset_segment_name(name)); }
};

}  // namespace

TEST_CASE(
    "tandem bench ddp: 1 and 2 ranks give step times, scaling and the ranks' all-reduce times, and --ceiling "
    "the same of two independent one-rank jobs" *
    doctest::timeout(240)) {
  SmallCache cache;
  const auto r = test::run_command(fmt::format("{} bench ddp --dataset {} --batch 32 --steps 300 --warmup 20 --ceiling",
                                               test::tandem_binary(), cache.name));
  CAPTURE(r.output);
  REQUIRE(r.status == 0);
  const auto line = json_line(r.output);
  REQUIRE(line.is_object());
  CHECK(line.at("bench") == "ddp");
  CHECK(line.at("one_rank").at("ranks") == 1);
  CHECK(line.at("one_rank").at("step_ms").get<double>() > 0);
  CHECK(line.at("ranks").at("ranks") == 2);
  CHECK(line.at("ranks").at("allreduce_ms").get<double>() > 0);
  CHECK(line.at("ranks").at("exposed_comm_ms").get<double>() >= 0);
  CHECK(line.at("scaling_efficiency").get<double>() > 0);
  CHECK(r.output.find("tandem                     2") != std::string::npos);  // the table's 2-rank row
  CHECK(line.at("independent_jobs").at("ranks") == 2);
  CHECK(line.at("independent_jobs").at("samples_per_s").get<double>() > 0);
  CHECK(line.at("contention_ceiling").get<double>() > 0);
  // The slowest job's pace is at most the jobs' mean pace.
  CHECK(line.at("lockstep_ceiling").get<double>() > 0);
  CHECK(line.at("lockstep_ceiling").get<double>() <= line.at("contention_ceiling").get<double>() + 1e-4);
  CHECK(line.at("independent_jobs").at("slowest_step_ms").get<double>() >=
        line.at("independent_jobs").at("step_ms").get<double>());
  CHECK(r.output.find("independent 1-rank jobs") != std::string::npos);
}

TEST_CASE(
    "tandem bench ddp --rounds 2 --collectives gloo: every round trains from step 0 and the medians are reported" *
    doctest::timeout(240)) {
  SmallCache cache;
  const auto r = test::run_command(
      fmt::format("{} bench ddp --dataset {} --batch 32 --steps 200 --warmup 20 --rounds 2 "
                  "--collectives gloo",
                  test::tandem_binary(), cache.name));
  CAPTURE(r.output);
  REQUIRE(r.status == 0);
  const auto line = json_line(r.output);
  REQUIRE(line.is_object());
  CHECK(line.at("backend") == "gloo");
  CHECK(line.at("rounds") == 2);
  REQUIRE(line.at("per_round").size() == 2);
  for (const auto& round : line.at("per_round")) CHECK(round.at("ranks").at("allreduce_ms").get<double>() > 0);
  // A second round that resumed the first's checkpoint would train nothing.
  CHECK(test::count_of(r.output, "steps (") == 6);
  CHECK(test::count_of(r.output, "from step 0;") == 6);
  CHECK(r.output.find("median of 2 rounds") != std::string::npos);
  CHECK(r.output.find("collectives over gloo") != std::string::npos);
}

TEST_CASE("tandem bench ddp: a missing dataset cache or a bad count is one line naming it" * doctest::timeout(60)) {
  struct Case {
    std::string args, says;
  };
  const Case cases[] = {
      {"--dataset no-such-cache-for-ddp",
       "dataset cache 'no-such-cache-for-ddp' is not in /dev/shm: run `tandem data preload"},
      {"--ranks 1", "--ranks 1 is out of range: use 2..64"},
      {"--batch 0", "--batch 0 must be positive"},
      {"--steps 5", "--steps 5 / --warmup 60 are too few"},
      {"--rounds 0", "--rounds 0 is out of range: use 1..20"},
      {"--precision bf16", "--precision bf16 needs --device cuda (CPU ranks train in float32)"},
  };
  for (const auto& c : cases) {
    const auto r = test::run_command(fmt::format("{} bench ddp {}", test::tandem_binary(), c.args));
    CAPTURE(r.output);
    CHECK(r.status == 1);
    CHECK(r.output.find(c.says) != std::string::npos);
    CHECK(std::count(r.output.begin(), r.output.end(), '\n') == 1);
  }
}
