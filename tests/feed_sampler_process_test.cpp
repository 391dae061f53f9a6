// EpochSampler across processes: another process computes the same order from the same options.
#include <doctest/doctest.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "learner/feed/epoch_sampler.hpp"
#include "tests/harness.hpp"

using namespace tandem;

namespace {
feed::SamplerOptions options(std::uint64_t seed, std::uint32_t device) {
  feed::SamplerOptions o;
  o.begin = 10;
  o.end = 60010;
  o.rank = 1;
  o.world_size = 2;
  o.batch_size = 256;
  o.seed = seed;
  o.device_index = device;
  return o;
}
}  // namespace

// args: seed device epoch output-path; writes the order as raw uint64s.
TANDEM_CHILD("epoch-order") {
  const auto& a = test::child_args();
  auto order = feed::EpochSampler(options(std::stoull(a.at(0)), static_cast<std::uint32_t>(std::stoul(a.at(1)))))
                   .epoch_order(std::stoull(a.at(2)));
  std::ofstream out(a.at(3), std::ios::binary);
  out.write(reinterpret_cast<const char*>(order.data()), static_cast<std::streamsize>(order.size() * sizeof order[0]));
  return out ? 0 : 1;
}

TEST_CASE("feed sampler: another process computes the same order from the same seed, device and epoch" *
          doctest::timeout(60)) {
  const std::string path = "/tmp/" + test::unique_name("tandem-order") + ".bin";
  for (std::uint32_t device : {0u, 3u}) {
    CAPTURE(device);
    auto child = test::spawn_child("epoch-order", {"1234", std::to_string(device), "9", path});
    REQUIRE(child.wait() == 0);
    std::ifstream in(path, std::ios::binary);
    std::vector<std::uint64_t> theirs(30000);
    in.read(reinterpret_cast<char*>(theirs.data()), static_cast<std::streamsize>(theirs.size() * sizeof theirs[0]));
    REQUIRE(in.gcount() == static_cast<std::streamsize>(theirs.size() * sizeof theirs[0]));
    CHECK(theirs == feed::EpochSampler(options(1234, device)).epoch_order(9));
    std::remove(path.c_str());
  }
}

TEST_CASE("feed sampler: the order is pinned, so a change to the generator cannot pass unnoticed") {
  // Computed once by this implementation (SplitMix64, Lemire bounded draws, Fisher-Yates from the
  // back); the same on every machine and in every process. If this fails, the generator changed and
  // resumed runs would read a different order.
  auto order = feed::EpochSampler(options(1234, 3)).epoch_order(9);
  std::vector<std::uint64_t> head(order.begin(), order.begin() + 6);
  CHECK(head == std::vector<std::uint64_t>{30368, 14983, 39573, 54533, 24542, 40090});
}
