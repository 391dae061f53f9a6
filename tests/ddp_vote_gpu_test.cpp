// GPU: GradSync's stop vote on a GPU is read without waiting for the device, two steps late on every
// rank alike (learner/ddp/grad_sync.hpp). Without a GPU this binary prints SKIP and exits 77.
#include "tests/torch_doctest.hpp"

#include <torch/torch.h>

#include "learner/ddp/grad_sync.hpp"
#include "learner/ddp/rank_env.hpp"
#include "tests/harness.hpp"
#include "tests/identical_peers.hpp"

TANDEM_GPU_TEST_BINARY();

using namespace tandem;

TEST_CASE("grad sync on a GPU: a stop vote is agreed two steps after it was cast, and only then") {
  REQUIRE(torch::cuda::is_available());
  test::Replica synced("mlp", torch::Device(torch::kCUDA, 0));
  test::IdenticalPeers peers;
  ddp::RankInfo rank;
  rank.world_size = 2;
  ddp::GradSync sync(synced.flat, synced.params(), peers, rank, {});
  std::vector<bool> agreed;
  for (int step = 0; step < 6; ++step) {
    sync.vote_stop(step == 1);  // one vote, at step 1
    synced.loss().backward();
    sync.finish(step);
    agreed.push_back(sync.stop_agreed());
    for (torch::Tensor& p : synced.params()) p.mutable_grad().zero_();
  }
  CHECK(agreed == std::vector<bool>{false, false, false, true, false, false});
}
