// GPU: the CUDA publish path (D2D snapshot, D2H into the registered slot, commit from the committer
// thread, coalescing, a transfer that fails to enqueue), and CUDA models published and followed.
// Skips (77) without a GPU.
#include <doctest/doctest.h>
#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <thread>
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

[[noreturn]] void illegal_address() {
  cuda::throw_cuda_error(700, "cudaMemcpyAsync(slot, staging, ...)", TANDEM_CALL_SITE);
}

// The next publish lands whole: the failed transfer left no write open in the slab.
void check_next_publish_lands(Publisher& pub, const std::string& name, const cuda::Buffer& src, cuda::Stream& train) {
  const std::uint64_t v = pub.next_version();
  learner::fill_verify_pattern_async(src.data(), src.size(), v, train.get());
  CHECK(pub.publish(100).outcome == Publisher::Outcome::in_flight);
  pub.flush();
  auto reader = shm::WeightSlabReader::attach(name, 1);
  auto lease = reader.lease_latest();
  REQUIRE(lease);
  CHECK(lease->version() == v);
  CHECK(shm::check_verify_pattern(lease->data(), lease->bytes(), v));
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

TEST_CASE(
    "publisher (CUDA): a transfer that fails to enqueue on the training thread throws there, once, and frees the slab") {
  constexpr std::size_t kBytes = 1 << 20;
  const std::string name = test::unique_name("tandem.test-gpu-enqueue-fault");
  auto slab = shm::WeightSlabWriter::create(name, spec_of(kBytes));
  auto train = cuda::Stream::create(0);
  auto src = cuda::Buffer::allocate(cuda::Buffer::Kind::device, kBytes);
  Publisher pub(slab, learner::PublishSource::on_device(src.data(), kBytes, 0, train.get()));
  pub.inject_transfer_fault_for_test(illegal_address);
  CHECK_THROWS_WITH_AS(pub.publish(1), doctest::Contains("cudaMemcpyAsync"), CallError);
  pub.inject_transfer_fault_for_test({});
  check_next_publish_lands(pub, name, src, train);
}

TEST_CASE(
    "publisher (CUDA): a pending snapshot whose transfer fails to enqueue on the committer surfaces that error once" *
    doctest::timeout(60)) {
  constexpr std::size_t kBytes = 256ull << 20;  // a D2H long enough for the next publish to wait behind it
  const std::string name = test::unique_name("tandem.test-gpu-committer-fault");
  auto slab = shm::WeightSlabWriter::create(name, spec_of(kBytes));
  auto train = cuda::Stream::create(0);
  auto src = cuda::Buffer::allocate(cuda::Buffer::Kind::device, kBytes);
  Publisher pub(slab, learner::PublishSource::on_device(src.data(), kBytes, 0, train.get()));
  const auto training = std::this_thread::get_id();
  std::atomic<bool> fired{false};
  pub.inject_transfer_fault_for_test([&] {  // only where the committer starts the pending snapshot
    if (std::this_thread::get_id() == training || fired.exchange(true)) return;
    illegal_address();
  });
  // The error reaches the training thread at its next publish or flush, whichever comes first.
  int errors = 0;
  const auto count_error = [&](auto&& call) {
    try {
      call();
    } catch (const CallError& e) {
      CHECK(std::string(e.what()).find("cudaMemcpyAsync") != std::string::npos);
      ++errors;
    }
  };
  for (int i = 0; i < 2000 && !fired; ++i) {  // until one publish waited behind a D2H and the committer started it
    count_error([&] { (void)pub.publish(i); });
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  REQUIRE(fired);
  count_error([&] { pub.flush(); });
  CHECK(errors == 1);
  pub.inject_transfer_fault_for_test({});
  check_next_publish_lands(pub, name, src, train);
}
