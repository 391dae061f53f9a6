// GPU: a whole job under `tandem run` with learner.cuda_graph and actor.cuda_graph on the GPU: the
// learner captures its step (DeviceFeed gather included) and replays it, the evaluator replays its
// batches, and the replayed training still learns. Without a GPU this binary prints SKIP and exits 77.
#include <doctest/doctest.h>

#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

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
