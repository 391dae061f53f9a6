// Data-parallel ranks over NCCL, one GPU each (the Gloo tests' counterparts): equivalence with one
// rank over the same samples, bitwise-equal ranks, and a killed rank ending its peer. Needs 2 GPUs and
// a CUDA LibTorch with NCCL; elsewhere the binary, or each case, says why it skips.
#include "tests/torch_doctest.hpp"

#include <signal.h>

#include <filesystem>
#include <thread>

#include "common/cuda.hpp"
#include "tests/case_check.hpp"
#include "tests/ddp_rank_child.hpp"
#include "tests/harness.hpp"

TANDEM_MULTI_GPU_TEST_BINARY(2);

using namespace tandem::test;

namespace {

bool two_gpus() {
#if defined(TANDEM_TORCH_CUDA) && defined(TANDEM_HAVE_NCCL)
  return tandem::cuda::device_count() >= 2;
#else
  return false;
#endif
}

// The binary already skips with fewer than 2 GPUs; this covers 2 GPUs under a LibTorch without CUDA
// or a build without NCCL.
#define REQUIRE_TWO_GPUS() \
  if (!two_gpus()) TANDEM_SKIP("needs 2 GPUs, a CUDA LibTorch and a build with NCCL")

std::vector<Child> spawn_ranks(RankRun base, const TempDir& dir, const std::string& tag) {
  base.port = free_loopback_port();
  base.device = "cuda";
  std::vector<Child> ranks;
  for (int r = 0; r < base.world; ++r) {
    RankRun run = base;
    run.rank = r;
    run.out = dir.file(fmt::format("{}-{}", tag, r));
    ranks.push_back(spawn_child("ddp-rank", rank_args(run)));
  }
  return ranks;
}

// Rank 1 SIGKILLed once past its first step (`captured`: a second later, well into the replays):
// rank 0's watchdog ends it within 10 s, non-zero.
void check_killed_rank_ends_peer(bool captured) {
  TempDir dir;
  RankRun base{.world = 2, .batch = 16, .steps = 1000000, .cuda_graph = captured, .collective_timeout_s = 5};
  base.marker = dir.file("trained");
  auto ranks = spawn_ranks(base, dir, "kill");
  int status = 0;
  while (!std::filesystem::exists(dir.file("trained")))
    if (ranks[1].wait_for(std::chrono::milliseconds(20), status))
      FAIL("rank 1 exited (" << status << ") before its first step");
  if (captured) std::this_thread::sleep_for(std::chrono::seconds(1));
  ranks[1].kill(SIGKILL);
  REQUIRE(ranks[0].wait_for(std::chrono::seconds(10), status));
  CHECK(status != 0);
}

}  // namespace

TEST_CASE("NCCL data-parallel mlp: 2 GPU ranks x batch 16 end with 1 GPU x batch 32's weights, ranks bitwise equal" *
          doctest::timeout(240)) {
  REQUIRE_TWO_GPUS();
  TempDir dir;
  auto two = spawn_ranks({.world = 2, .batch = 16, .steps = 50}, dir, "two");
  for (auto& c : two) REQUIRE(c.wait() == 0);
  auto one = spawn_ranks({.world = 1, .batch = 32, .steps = 50}, dir, "one");
  REQUIRE(one[0].wait() == 0);
  const RankResult a = read_rank_result(dir.file("two-0")), b = read_rank_result(dir.file("two-1")),
                   c = read_rank_result(dir.file("one-0"));
  CHECK(a.flat == b.flat);
  CHECK(relative_difference(a.flat, c.flat) < 1e-4);
}

TEST_CASE(
    "NCCL data-parallel, captured (learner.cuda_graph): 2 GPU ranks end equal bit for bit and within 1e-5 of 2 "
    "eager ranks over the same samples" *
    doctest::timeout(240)) {
  REQUIRE_TWO_GPUS();
  TempDir dir;
  auto captured = spawn_ranks({.world = 2, .batch = 16, .steps = 50, .cuda_graph = true}, dir, "graph");
  for (auto& c : captured) REQUIRE(c.wait() == 0);  // a rank that stepped eagerly fails
  auto eager = spawn_ranks({.world = 2, .batch = 16, .steps = 50}, dir, "eager");
  for (auto& c : eager) REQUIRE(c.wait() == 0);
  const RankResult a = read_rank_result(dir.file("graph-0")), b = read_rank_result(dir.file("graph-1")),
                   c = read_rank_result(dir.file("eager-0"));
  CHECK(a.step == 50);
  CHECK(a.flat == b.flat);
  CHECK(relative_difference(a.flat, c.flat) < 1e-5);
}

TEST_CASE("NCCL data-parallel, captured: rank 1's stop vote ends both ranks after the same step" *
          doctest::timeout(240)) {
  REQUIRE_TWO_GPUS();
  TempDir dir;
  auto ranks = spawn_ranks({.world = 2, .batch = 16, .steps = 200, .stop_vote_at = 20, .cuda_graph = true}, dir,
                           "vote");
  for (auto& c : ranks) REQUIRE(c.wait() == 0);
  const RankResult a = read_rank_result(dir.file("vote-0")), b = read_rank_result(dir.file("vote-1"));
  CHECK(a.step == b.step);
  CHECK(a.step >= 20);  // the vote counts from step 20 or the one before, and is read two steps late
  CHECK(a.step <= 24);
  CHECK(a.flat == b.flat);
}

TEST_CASE("NCCL data-parallel fault: SIGKILL of rank 1 makes rank 0 exit non-zero within 10 s" *
          doctest::timeout(120)) {
  REQUIRE_TWO_GPUS();
  check_killed_rank_ends_peer(false);
}

TEST_CASE("NCCL data-parallel fault, captured: SIGKILL of rank 1 makes rank 0 exit non-zero within 10 s" *
          doctest::timeout(120)) {
  REQUIRE_TWO_GPUS();
  check_killed_rank_ends_peer(true);
}
