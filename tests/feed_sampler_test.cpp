// EpochSampler (learner/feed/epoch_sampler.hpp): sharding, shuffling and lengths. Torch-free.
#include <doctest/doctest.h>

#include <algorithm>
#include <set>

#include "common/error.hpp"
#include "learner/feed/epoch_sampler.hpp"
#include "tests/harness.hpp"

using namespace tandem;
using feed::EpochSampler;
using feed::SamplerOptions;

namespace {
SamplerOptions options(std::uint64_t begin, std::uint64_t end, std::uint32_t rank, std::uint32_t world) {
  SamplerOptions o;
  o.begin = begin;
  o.end = end;
  o.rank = rank;
  o.world_size = world;
  o.batch_size = 10;
  o.seed = 42;
  o.device_index = rank;
  return o;
}
}  // namespace

TEST_CASE("feed sampler: every index of a rank's shard is visited once per epoch, and rank shards are disjoint") {
  const std::uint64_t begin = 100, end = 1103;  // N = 1003: with 4 ranks, 3 samples are left out
  for (std::uint64_t epoch : {0, 1, 7}) {
    std::set<std::uint64_t> all;
    for (std::uint32_t rank = 0; rank < 4; ++rank) {
      EpochSampler s(options(begin, end, rank, 4));
      REQUIRE(s.shard_size() == 250);
      auto order = s.epoch_order(epoch);
      REQUIRE(order.size() == 250);
      std::set<std::uint64_t> mine(order.begin(), order.end());
      CHECK(mine.size() == 250);  // each once
      CHECK(*mine.begin() >= begin);
      CHECK(*mine.rbegin() < end);
      for (auto i : mine) CHECK_MESSAGE(all.insert(i).second, "index " << i << " is in two ranks' shards");
    }
    CHECK(all.size() == 1000);
  }
}

TEST_CASE("feed sampler: the shard depends on seed, epoch and rank only; the device reorders it") {
  auto a = options(0, 500, 1, 3);
  auto b = a;
  b.device_index = 5;
  auto order_a = EpochSampler(a).epoch_order(2), order_b = EpochSampler(b).epoch_order(2);
  CHECK(order_a != order_b);
  std::sort(order_a.begin(), order_a.end());
  std::sort(order_b.begin(), order_b.end());
  CHECK(order_a == order_b);
}

TEST_CASE("feed sampler: the same options give the same order; devices, epochs and seeds give different ones") {
  auto o = options(0, 2000, 0, 1);
  const auto base = EpochSampler(o).epoch_order(3);
  CHECK(EpochSampler(o).epoch_order(3) == base);
  CHECK(EpochSampler(o).epoch_order(4) != base);
  auto other_device = o;
  other_device.device_index = 1;
  CHECK(EpochSampler(other_device).epoch_order(3) != base);
  auto other_seed = o;
  other_seed.seed = 43;
  CHECK(EpochSampler(other_seed).epoch_order(3) != base);
  // device d with seed s is not device 0 with seed s + d: the prime spreads device seeds apart
  auto shifted = o;
  shifted.seed = o.seed + 1;
  CHECK(EpochSampler(other_device).epoch_order(3) != EpochSampler(shifted).epoch_order(3));
}

TEST_CASE("feed sampler: lengths and batch sizes are exact with drop_last on and off") {
  struct Row {
    std::uint64_t n;
    std::uint32_t world;
    std::uint64_t batch;
    bool drop_last;
    std::uint64_t length;
    std::uint64_t last_batch;
  };
  const Row rows[] = {
      {1000, 1, 100, false, 10, 100}, {1000, 1, 100, true, 10, 100}, {1001, 1, 100, false, 11, 1},
      {1001, 1, 100, true, 10, 100},  {1003, 4, 32, false, 8, 26},   {1003, 4, 32, true, 7, 32},
      {5, 8, 1, false, 0, 0},         {50, 1, 64, false, 1, 50},     {50, 1, 64, true, 0, 0},
  };
  for (const Row& r : rows) {
    CAPTURE(r.n);
    CAPTURE(r.world);
    CAPTURE(r.batch);
    CAPTURE(r.drop_last);
    SamplerOptions o;
    o.end = r.n;
    o.world_size = r.world;
    o.batch_size = r.batch;
    o.drop_last = r.drop_last;
    EpochSampler s(o);
    CHECK(s.length() == r.length);
    if (r.length == 0) continue;
    CHECK(s.batch_samples(r.length - 1) == r.last_batch);
    std::uint64_t total = 0;
    for (std::uint64_t b = 0; b < s.length(); ++b) total += s.batch_samples(b);
    CHECK(total == (r.drop_last ? r.length * r.batch : s.shard_size()));
    CHECK(s.batch_samples(s.length()) == 0);
  }
}

TEST_CASE("feed sampler: a bad rank, world size or batch size is a one-line error") {
  auto o = options(0, 10, 0, 1);
  o.world_size = 0;
  CHECK_THROWS_WITH_AS(EpochSampler{o}, doctest::Contains("world size is 0"), UserError);
  o = options(0, 10, 2, 2);
  CHECK_THROWS_WITH_AS(EpochSampler{o}, doctest::Contains("rank 2 is out of range for world size 2"), UserError);
  o = options(0, 10, 0, 1);
  o.batch_size = 0;
  CHECK_THROWS_WITH_AS(EpochSampler{o}, doctest::Contains("batch size is 0"), UserError);
}

TEST_CASE("feed sampler: the generator's bounded draws stay in range and are close to uniform") {
  feed::SplitMix64 rng(1, 2);
  std::uint64_t counts[10] = {};
  for (int i = 0; i < 100000; ++i) {
    const auto v = rng.bounded(10);
    REQUIRE(v < 10);
    ++counts[v];
  }
  for (auto c : counts) CHECK(c == doctest::Approx(10000).epsilon(0.05));
  CHECK(rng.bounded(1) == 0);
}
