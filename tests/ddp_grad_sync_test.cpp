// GradSync's buckets and hooks in one process, against a communicator that stands in for identical
// other ranks (the sum over `world` equal ranks is world x the tensor): launch order, overlap with backward,
// the fused average, the gradient views, the buffers riding with the last bucket and the stop vote.
#include "tests/torch_doctest.hpp"

#include <torch/nn/functional/loss.h>
#include <torch/types.h>
#include <torch/utils.h>

#include <vector>

#include "common/torch/flat_params.hpp"
#include "common/torch/models.hpp"
#include "learner/ddp/comm.hpp"
#include "learner/ddp/grad_sync.hpp"
#include "learner/ddp/rank_env.hpp"
#include "tests/identical_peers.hpp"

using namespace tandem;
using test::IdenticalPeers;
using test::Replica;

TEST_CASE("grad sync: buckets launch during backward, last parameters first, and average to the single-rank gradient") {
  Replica synced, plain;
  IdenticalPeers peers;
  ddp::RankInfo rank;
  rank.world_size = 2;
  ddp::GradSync sync(synced.flat, synced.params(), peers, rank, {.bucket_first_mb = 0.0625, .bucket_mb = 0.25});
  REQUIRE(sync.bucket_count() >= 2);

  peers.in_backward = true;
  synced.loss().backward();
  peers.in_backward = false;
  CHECK(peers.launches.size() == sync.bucket_count());  // every bucket was launched from a hook
  for (const auto& l : peers.launches) CHECK(l.during_backward);
  for (const auto& l : peers.launches) CHECK(l.carried_bytes == 0);  // the mlp has no buffers
  // The first bucket: the last parameters until it reaches 64 KiB (16384 floats), plus the stop vote.
  std::int64_t first = 1;
  const auto params = synced.params();
  for (auto p = params.rbegin(); p != params.rend() && first - 1 < 16384; ++p) first += p->numel();
  CHECK(peers.launches[0].numel == first);
  for (std::size_t i = 1; i < peers.launches.size(); ++i)  // walking the flat gradients from the end
    CHECK(static_cast<const float*>(peers.launches[i].data) < static_cast<const float*>(peers.launches[i - 1].data));
  sync.vote_stop(false);
  sync.finish(0);
  CHECK_FALSE(sync.stop_agreed());

  plain.loss().backward();
  const auto a = synced.params(), b = plain.params();
  for (std::size_t i = 0; i < a.size(); ++i) {
    CHECK(a[i].grad().storage().is_alias_of(sync.grad_buffer().storage()));
    CHECK(torch::equal(a[i].grad(), b[i].grad()));  // x 1/2 then x 2: exact
  }
}

TEST_CASE("grad sync: the last bucket carries rank 0's BatchNorm buffers, and only it") {
  Replica synced("cnn");
  IdenticalPeers peers;
  ddp::RankInfo rank;
  rank.world_size = 2;
  ddp::GradSync sync(synced.flat, synced.params(), peers, rank, {.bucket_first_mb = 0.0625, .bucket_mb = 0.25});
  REQUIRE(sync.bucket_count() >= 2);
  synced.loss().backward();
  sync.vote_stop(false);
  sync.finish(0);
  REQUIRE(peers.launches.size() == sync.bucket_count());
  for (std::size_t i = 0; i + 1 < peers.launches.size(); ++i) CHECK(peers.launches[i].carried == nullptr);
  const auto& last = peers.launches.back();
  const auto buffers = synced.model.nn_module()->buffers();
  CHECK(buffers.size() == 6);  // two BatchNorms' running means, variances and batch counts
  for (const at::Tensor& b : buffers) {
    const auto* at = static_cast<const std::byte*>(b.data_ptr());
    CHECK(at >= last.carried);
    CHECK(at + b.nbytes() <= last.carried + last.carried_bytes);
  }
}

TEST_CASE("grad sync: one rank's stop vote is every rank's after finish, and is cleared for the next step") {
  Replica synced;
  IdenticalPeers peers;
  ddp::RankInfo rank;
  rank.world_size = 2;
  ddp::GradSync sync(synced.flat, synced.params(), peers, rank, {});
  sync.vote_stop(true);
  synced.loss().backward();
  sync.finish(0);
  CHECK(sync.stop_agreed());
  sync.vote_stop(false);
  synced.loss().backward();
  sync.finish(1);
  CHECK_FALSE(sync.stop_agreed());
}

TEST_CASE(
    "grad sync: rehook makes fresh accumulators whose hooks launch every bucket once, and refuses while a graph "
    "holds the old ones") {
  Replica synced;
  IdenticalPeers peers;
  ddp::RankInfo rank;
  rank.world_size = 2;
  ddp::GradSync sync(synced.flat, synced.params(), peers, rank, {.bucket_first_mb = 0.0625, .bucket_mb = 0.25});
  sync.rehook();
  synced.loss().backward();
  CHECK(peers.launches.size() == sync.bucket_count());  // one hook per parameter, not two
  sync.finish(0);

  const torch::Tensor alive = synced.loss();  // its graph holds the parameters' accumulators
  CHECK_THROWS_WITH_AS(sync.rehook(), doctest::Contains("an autograd graph still holds"), std::logic_error);
}
