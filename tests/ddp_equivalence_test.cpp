// Data-parallel ranks train what one rank trains, over Gloo and over the node's shared-memory group:
// 2 ranks x batch B == 1 rank x batch 2B over the same samples (tests/ddp_rank_child.hpp), the ranks
// end bitwise equal, and a stop voted by one rank stops both after the same step.
#include "tests/torch_doctest.hpp"

#include <fmt/format.h>
#include <torch/script.h>
#include <torch/types.h>
#include <torch/utils.h>

#include <filesystem>
#include <functional>

#include "shm/segment.hpp"
#include "tests/ddp_rank_child.hpp"
#include "tests/harness.hpp"

using namespace tandem::test;

namespace {

// Runs `world` ranks of `base` to completion; every rank must exit 0.
std::vector<RankResult> run_ranks(RankRun base, const TempDir& dir, const std::string& tag) {
  if (base.port == 0) base.port = free_loopback_port();
  std::vector<Child> ranks;
  for (int r = 0; r < base.world; ++r) {
    RankRun run = base;
    run.rank = r;
    run.out = dir.file(fmt::format("{}-{}", tag, r));
    ranks.push_back(spawn_child("ddp-rank", rank_args(run)));
  }
  std::vector<RankResult> results;
  for (int r = 0; r < base.world; ++r) {
    INFO(tag << " rank " << r);
    REQUIRE(ranks[r].wait() == 0);
    results.push_back(read_rank_result(dir.file(fmt::format("{}-{}", tag, r))));
    REQUIRE(results.back().step >= 0);
  }
  return results;
}

void check_equivalent(const std::string& model, std::size_t float_bytes, const std::string& collectives) {
  TempDir dir;
  const auto two = run_ranks({.model = model, .world = 2, .batch = 16, .steps = 50, .collectives = collectives}, dir,
                             "two");
  const auto one = run_ranks({.model = model, .world = 1, .batch = 32, .steps = 50}, dir, "one");
  CHECK(two[0].step == 50);
  CHECK(two[1].step == 50);
  CHECK(std::hash<std::string>{}(two[0].flat) == std::hash<std::string>{}(two[1].flat));
  CHECK(two[0].flat == two[1].flat);
  const double rel = relative_difference(two[0].flat, one[0].flat, float_bytes ? float_bytes : one[0].flat.size());
  MESSAGE(model << " over " << collectives << ": 2 ranks x 16 vs 1 rank x 32 after 50 steps, relative L2 difference "
                << rel);
  CHECK(rel < 1e-4);
}

// A two-layer perceptron as TorchScript, made without Python (Module::define compiles the source).
void save_script_mlp(const std::string& path) {
  torch::manual_seed(3);
  torch::jit::Module m("ScriptMlp");
  m.register_attribute("training", c10::BoolType::get(), true);
  m.register_parameter("w1", (torch::randn({784, 64}) * 0.05).requires_grad_(true), false);
  m.register_parameter("b1", torch::zeros({64}).requires_grad_(true), false);
  m.register_parameter("w2", (torch::randn({64, 10}) * 0.1).requires_grad_(true), false);
  m.register_parameter("b2", torch::zeros({10}).requires_grad_(true), false);
  m.define(R"(
def forward(self, x):
    h = torch.relu(torch.addmm(self.b1, x.flatten(1), self.w1))
    return torch.addmm(self.b2, h, self.w2)
)");
  m.save(path);
}

}  // namespace

TEST_CASE(
    "data-parallel mlp: 2 ranks x batch 16 for 50 steps end with 1 rank x batch 32's weights, ranks bitwise equal, "
    "over Gloo and over shared memory" *
    doctest::timeout(240)) {
  for (const std::string collectives : {"gloo", "shm-caller", "shm-thread"}) {
    CAPTURE(collectives);
    check_equivalent("mlp", 0, collectives);
  }
}

TEST_CASE(
    "data-parallel TorchScript model: 2 ranks x batch 16 end with 1 rank x batch 32's weights, ranks bitwise equal, "
    "over Gloo and over shared memory" *
    doctest::timeout(240)) {
  TempDir dir;
  const std::string path = dir.file("script_mlp.pt");
  save_script_mlp(path);
  for (const std::string collectives : {"gloo", "shm-caller", "shm-thread"}) {
    CAPTURE(collectives);
    check_equivalent(path, 0, collectives);
  }
}

// BatchNorm normalises each rank's batch of 16 by its own statistics, so the cnn is NOT 1 rank x 32:
// what holds is that rank 0's running statistics are broadcast every step, so parameters AND buffers
// are bitwise equal on every rank after any run (the weights a checkpoint or publish takes).
TEST_CASE(
    "data-parallel cnn (BatchNorm): 2 ranks end with bitwise equal parameters and buffers, over Gloo and over "
    "shared memory" *
    doctest::timeout(300)) {
  TempDir dir;
  for (const std::string collectives : {"gloo", "shm-caller", "shm-thread"}) {
    CAPTURE(collectives);
    const auto two = run_ranks({.model = "cnn", .world = 2, .batch = 8, .steps = 20, .collectives = collectives}, dir,
                               "cnn-" + collectives);
    CHECK(two[0].step == 20);
    CHECK(two[0].flat == two[1].flat);
  }
}

TEST_CASE("data-parallel stop: a stop voted by rank 1 at step 20 stops both ranks after step 21, still equal" *
          doctest::timeout(240)) {
  TempDir dir;
  const auto two = run_ranks({.model = "mlp", .world = 2, .batch = 16, .steps = 50, .stop_vote_at = 20}, dir, "stop");
  CHECK(two[0].step == 21);
  CHECK(two[1].step == 21);
  CHECK(two[0].flat == two[1].flat);
}

TEST_CASE("data-parallel shared memory: three ranks train bitwise equal and leave nothing of the job in /dev/shm" *
          doctest::timeout(240)) {
  TempDir dir;
  RankRun run{.model = "mlp", .world = 3, .port = free_loopback_port(), .batch = 8, .steps = 20};
  const auto three = run_ranks(run, dir, "three");
  CHECK(three[0].step == 20);
  CHECK(three[0].flat == three[1].flat);
  CHECK(three[0].flat == three[2].flat);
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm"))
    CHECK_FALSE(entry.path().filename().string().starts_with(tandem::shm::job_segment_prefix(job_of(run.port))));
}
