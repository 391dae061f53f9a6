// GPU: the CUDA publish path (D2D snapshot, D2H into the registered slot, commit from the committer
// thread, coalescing), and CUDA models published and followed. Skips (77) without a GPU.
#include <doctest/doctest.h>
#include <cuda_runtime_api.h>

#include <chrono>
#include <vector>

#include "learner/publisher.hpp"
#include "shm/verify_pattern.hpp"
#include "shm/weight_slab.hpp"
#include "tests/harness.hpp"

TANDEM_GPU_TEST_BINARY();

using namespace tandem;
using learner::Publisher;

namespace {
shm::SlabSpec spec_of(std::size_t bytes) {
  shm::SlabSpec spec;
  spec.model = "gpu-test";
  spec.tensors = {{"payload", shm::DType::u8, {bytes}, 0, bytes}};
  spec.slot_bytes = bytes;
  return spec;
}
}  // namespace

TEST_CASE("publisher (CUDA): every committed version arrives intact and publish() returns before the copy") {
  constexpr std::size_t kBytes = 256ull << 20;
  const std::string name = test::unique_name("tandem.test-gpu-publish");
  auto slab = shm::WeightSlabWriter::create(name, spec_of(kBytes));
  auto train = cuda::Stream::create(0);
  auto src = cuda::Buffer::allocate(cuda::Buffer::Kind::device, kBytes);
  Publisher pub(slab, learner::PublishSource::on_device(src.data(), kBytes, 0, train.get()));
  auto reader = shm::WeightSlabReader::attach(name, 1);

  for (int i = 0; i < 5; ++i) {  // one at a time: each must land exactly
    const std::uint64_t v = pub.next_version();
    learner::fill_verify_pattern_async(src.data(), kBytes, v, train.get());
    auto t0 = std::chrono::steady_clock::now();
    CHECK(pub.publish(i).outcome == Publisher::Outcome::in_flight);
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(5));
    pub.flush();
    auto lease = reader.lease_latest();
    REQUIRE(lease);
    CHECK(lease->version() == v);
    CHECK(shm::check_verify_pattern(lease->data(), lease->bytes(), v));
  }
  auto timings = pub.take_timings();
  REQUIRE(timings.size() == 5);
  CHECK(timings.back().d2h_ms > 0);
  CHECK(timings.back().snapshot_ms > 0);
  MESSAGE("snapshot " << timings.back().snapshot_ms << " ms, D2H " << timings.back().d2h_ms << " ms, visible "
                      << timings.back().visible_ms << " ms for 256 MiB");
}

TEST_CASE("publisher (CUDA): publishes during a running D2H coalesce and the newest snapshot wins") {
  constexpr std::size_t kBytes = 256ull << 20;
  const std::string name = test::unique_name("tandem.test-gpu-coalesce");
  auto slab = shm::WeightSlabWriter::create(name, spec_of(kBytes));
  auto train = cuda::Stream::create(0);
  auto src = cuda::Buffer::allocate(cuda::Buffer::Kind::device, kBytes);
  Publisher pub(slab, learner::PublishSource::on_device(src.data(), kBytes, 0, train.get()));
  std::uint64_t last = 0;
  for (int i = 0; i < 20; ++i) {  // far faster than a 256 MiB D2H
    last = pub.next_version();
    learner::fill_verify_pattern_async(src.data(), kBytes, last, train.get());
    (void)pub.publish(i);  // in flight, coalesced or skipped: only the last commit is checked
  }
  pub.flush();
  auto stats = pub.stats();
  CHECK(stats.coalesced > 0);
  CHECK(stats.committed + stats.coalesced + stats.skipped == stats.calls);
  CHECK(slab.latest_version() == last);
  auto reader = shm::WeightSlabReader::attach(name, 1);
  auto lease = reader.lease_latest();
  REQUIRE(lease);
  CHECK(shm::check_verify_pattern(lease->data(), lease->bytes(), last));
}
