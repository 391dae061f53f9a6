// GPU: a whole job under `tandem run` with learner.cuda_graph and actor.cuda_graph on the GPU: the
// learner captures its step (DeviceFeed gather included) and replays it, the evaluator replays its
// batches, and the replayed training still learns. Without a GPU this binary prints SKIP and exits 77.
#include <doctest/doctest.h>

#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "shm/dataset_cache.hpp"
#include "shm/segment.hpp"
#include "tests/harness.hpp"
#include "tests/tiny_cache.hpp"

TANDEM_GPU_TEST_BINARY();

using namespace tandem;
namespace fs = std::filesystem;

TEST_CASE("a GPU job with cuda_graph = true replays its training step and evaluation and still learns" *
          doctest::timeout(300)) {
  const test::TinyCache cache("graphgpu");
  const test::TempDir dir;
  const fs::path config = dir / "job.toml";
  // 200 steps of 32 over a 2048-sample split: three epoch boundaries (the feed re-uploads its order).
  std::ofstream(config) << test::tiny_job_config(
      {.job = test::unique_name("graphgpujob"),
       .dataset = cache.name,
       .run_keys = fmt::format("actors = 1\nrun_dir = \"{}\"", (dir / "run").string()),
       .keys = R"(learner.device = "cuda"
supervised.feed = "device"
learner.cuda_graph = true
supervised.batch_size = 32
supervised.steps = 200
schedule.warmup_steps = 10
publish.every_steps = 50
checkpoint.every_steps = 0
actor.device = "cuda"
actor.cuda_graph = true
actor.min_interval_s = 0
actor.batch_size = 64)"});
  const auto r = test::run_command(fmt::format("{} run '{}' 2>&1", test::tandem_binary(), config.string()));
  INFO(r.output);
  CHECK(r.status == 0);
  CHECK(test::count_of(r.output, "learner.cuda_graph: the training step is captured") == 1);
  CHECK(test::count_of(r.output, "capturing the training step failed") == 0);
  CHECK(test::count_of(r.output, "capturing the evaluation failed") == 0);
  CHECK(test::count_of(r.output, "eagerly") == 0);
  CHECK(r.output.find("finished at step 200") != std::string::npos);
  // The final version's evaluation (every full batch replayed): the tiny task is learnt.
  const auto at = r.output.find("(step 200): test accuracy ");
  REQUIRE(at != std::string::npos);
  CHECK(std::stod(r.output.substr(at + 26, 6)) >= 0.9);
}

namespace {

// A CIFAR-shaped (3x32x32 uint8) learnable cache: noise plus a faint 8x8 square whose position and
// colour channel give the class, and 10 % of labels drawn at random, so accuracy tops out near 0.9
// and the runs' curves have room to differ. 8192 train, 1024 test samples.
struct PatternCifar {
  std::string name = test::unique_name("patterncifar");
  PatternCifar() {
    const std::uint64_t n = 9216;
    shm::DatasetSpec spec{.name = name,
                          .source = "generated",
                          .format = "test",
                          .num_samples = n,
                          .fields = {{"x", shm::DType::u8, {3, 32, 32}}, {"y", shm::DType::i64, {}}},
                          .splits = {{"train", 0, 8192}, {"test", 8192, n}}};
    auto w = shm::DatasetWriter::create(spec, false);
    auto* x = reinterpret_cast<std::uint8_t*>(w.field_data(0));
    auto* y = reinterpret_cast<std::int64_t*>(w.field_data(1));
    std::uint64_t state = 12345;
    auto next = [&] { return (state = state * 6364136223846793005ULL + 1442695040888963407ULL) >> 33; };
    for (std::uint64_t i = 0; i < n; ++i) {
      const auto label = static_cast<std::int64_t>(next() % 10);
      const std::int64_t top = (label % 3) * 12, left = (label / 3) * 8, channel = label % 3;
      for (std::int64_t c = 0; c < 3; ++c)
        for (std::int64_t r = 0; r < 32; ++r)
          for (std::int64_t col = 0; col < 32; ++col) {
            const bool inside = c == channel && r >= top && r < top + 8 && col >= left && col < left + 8;
            x[i * 3072 + static_cast<std::uint64_t>(c * 1024 + r * 32 + col)] = static_cast<std::uint8_t>(
                next() % 160 + (inside ? 60 : 0));
          }
      y[i] = next() % 10 == 0 ? static_cast<std::int64_t>(next() % 10) : label;
    }
    w.commit(0, 1);
  }
  ~PatternCifar() { shm::Segment::unlink(shm::dataset_segment_name(name)); }
};

// Runs the cifar10-resnet18.toml shape (ResNet-18, DeviceFeed, SGD Nesterov, cosine, a GPU
// evaluator) on `data` for 3 epochs with extra learner keys; returns the final test accuracy.
double resnet18_job_accuracy(const PatternCifar& data, const test::TempDir& dir, const std::string& tag,
                             const std::string& learner_extra) {
  const fs::path config = dir / (tag + ".toml");
  std::ofstream(config) << fmt::format(R"([run]
job = "{}"
unique_id = false
learner_program = "{}"
actor_program = "{}"
status = "plain"
actors = 1
run_dir = "{}"
[data]
name = "{}"
mean = "0.4,0.4,0.4"
std = "0.25,0.25,0.25"
[model]
name = "resnet18"
num_classes = 10
[learner]
device = "cuda"
report_every_steps = 50
{}
[supervised]
feed = "device"
batch_size = 128
epochs = 3
[optimizer]
lr = 0.05
[schedule]
warmup_steps = 20
[publish]
every_steps = 1000
[checkpoint]
every_steps = 0
[actor]
device = "cuda"
cuda_graph = true
min_interval_s = 0
batch_size = 512
)",
                                       test::unique_name(tag), test::required_env("TANDEM_LEARNER"),
                                       test::required_env("TANDEM_ACTOR"), (dir / tag).string(), data.name,
                                       learner_extra);
  const auto r = test::run_command(fmt::format("{} run '{}' 2>&1", test::tandem_binary(), config.string()));
  INFO(r.output);
  REQUIRE(r.status == 0);
  const auto at = r.output.rfind("): test accuracy ");
  REQUIRE(at != std::string::npos);
  return std::stod(r.output.substr(at + 17, 6));
}

}  // namespace

TEST_CASE("a ResNet-18 job trains to eager's accuracy with the fused, captured step, in float32 and bf16" *
          doctest::timeout(400)) {
  const PatternCifar data;
  const test::TempDir dir;
  const double eager = resnet18_job_accuracy(data, dir, "eager", "cuda_graph = false");
  const double graph = resnet18_job_accuracy(data, dir, "graph", "cuda_graph = true");
  const double bf16 = resnet18_job_accuracy(data, dir, "bf16", "cuda_graph = true\nprecision = \"bf16\"");
  MESSAGE("final test accuracy: eager ", eager, ", fused and captured ", graph, ", the same in bf16 ", bf16);
  CHECK(eager >= 0.6);  // learnt, not chance (0.1)
  CHECK(std::abs(graph - eager) <= 0.03);
  CHECK(std::abs(bf16 - eager) <= 0.05);
}
