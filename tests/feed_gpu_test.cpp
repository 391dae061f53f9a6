// The feeds on a GPU: HostFeed's pinned ring under a slow copy stream and a slow consumer, and
// DeviceFeed's contents. Without a GPU this binary reports SKIP (exit 77).
#include "tests/torch_doctest.hpp"

#include "tests/harness.hpp"

TANDEM_GPU_TEST_BINARY();

#ifdef TANDEM_TORCH_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <torch/cuda.h>

#include <chrono>
#include <thread>

#include "learner/feed/device_feed.hpp"
#include "learner/feed/host_feed.hpp"
#include "shm/dataset_cache.hpp"
#include "tests/feed_expect.hpp"

using namespace tandem;
using feed::FeedOptions;

namespace {

struct Fixture {
  explicit Fixture(feed::SyntheticKind kind = feed::SyntheticKind::classification)
      : data(test::unique_name("feedgpu"), 3000, 500, {3, 8, 8}, kind), cache(shm::DatasetCache::attach(data.name())) {}
  feed::SyntheticDataset data;
  shm::DatasetCache cache;
};

FeedOptions gpu_options() {
  FeedOptions o;
  o.placement = feed::Placement::cuda;
  o.batch_size = 16;
  o.consumers = 2;
  o.seed = 11;
  o.mean = {0.4f, 0.5f, 0.6f};
  o.stddev = {0.2f, 0.3f, 0.4f};
  o.workers = 4;
  o.ring_slots = 2;
  return o;
}

void CUDART_CB sleep_ms(void* ms) { std::this_thread::sleep_for(std::chrono::milliseconds(*static_cast<int*>(ms))); }

}  // namespace

TEST_CASE("HostFeed on the GPU: with a slow copy stream and a slow consumer, no slot is rewritten before its fence" *
          doctest::timeout(120)) {
  Fixture f;
  auto o = gpu_options();
  o.copy_delay_us = 3000;  // every H2D copy starts 3 ms late: workers must wait for it before refilling
  feed::HostFeed feed(f.cache, o);
  REQUIRE(feed.on_gpu());
  // The consumer runs on its own stream, which sleeps before each conversion: the copy stream must
  // not overwrite a slot's device staging before the conversion that reads it has run.
  c10::cuda::CUDAStreamGuard on(c10::cuda::getStreamFromPool(false, 0));
  static int delay = 2;
  const auto order = feed.sampler().epoch_order(0);
  std::vector<feed::Step> steps;
  for (std::uint64_t i = 0; i < 40 && i < feed.length(); ++i) {
    REQUIRE(cudaLaunchHostFunc(c10::cuda::getCurrentCUDAStream(0).stream(), sleep_ms, &delay) == cudaSuccess);
    steps.push_back(feed.next());
    for (const auto& b : steps.back().batches) CHECK(b.x.is_cuda());
    CHECK(test::storage_disjoint(steps.back()));
  }
  torch::cuda::synchronize(0);
  for (std::size_t i = 0; i < steps.size(); ++i)
    for (std::uint32_t c = 0; c < o.consumers; ++c) {
      CAPTURE(i);
      test::check_batch(feed.layout(), steps[i].batches[c], test::rows_of(order, i * 32, 32, c, 2));
    }
}

TEST_CASE("HostFeed on the GPU: whole epochs hold the sampler's samples, short last step included" *
          doctest::timeout(120)) {
  Fixture f;
  auto o = gpu_options();
  o.ring_slots = 3;
  o.batch_size = 100;  // 3000 / 200: 15 steps; the test split's 500 gives a short last step
  feed::HostFeed train(f.cache, o);
  test::check_epochs(train, train.layout(), o, 0, 2);
  o.split = "test";
  feed::HostFeed test_split(f.cache, o);
  CHECK(test_split.length() == 3);
  test::check_epochs(test_split, test_split.layout(), o, 0, 2);
}

TEST_CASE("DeviceFeed: batches hold the dataset's samples in the sampler's order, in separate allocations" *
          doctest::timeout(120)) {
  Fixture f;
  auto o = gpu_options();
  o.consumers = 3;
  o.batch_size = 50;
  feed::DeviceFeed feed(f.cache, o, /*first_epoch=*/2);
  test::check_epochs(feed, feed::describe_feed(f.cache, o), o, 2, 3);
}

TEST_CASE("DeviceFeed::next(refill) fills the offered batches where they fit and allocates where not" *
          doctest::timeout(120)) {
  Fixture f;
  auto o = gpu_options();  // two consumers of 16
  o.drop_last = true;
  feed::DeviceFeed plain(f.cache, o), refilled(f.cache, o);
  (void)plain.next();
  const feed::Step first = refilled.next();
  const std::vector<feed::Batch> offer{first.batches[1], first.batches[0]};  // either fits either consumer
  const feed::Step second = refilled.next(offer);
  const feed::Step expected = plain.next();
  CHECK(second.batches[0].x.data_ptr() == first.batches[1].x.data_ptr());
  CHECK(second.batches[1].y.data_ptr() == first.batches[0].y.data_ptr());
  torch::cuda::synchronize();
  for (int c = 0; c < 2; ++c) {
    CHECK(torch::equal(second.batches[c].x, expected.batches[c].x));
    CHECK(torch::equal(second.batches[c].y, expected.batches[c].y));
  }

  const std::vector<feed::Batch> misfits{
      {torch::empty({15, 3, 8, 8}, second.batches[0].x.options()), second.batches[0].y},
      {second.batches[1].x.transpose(2, 3), second.batches[1].y}};
  const feed::Step third = refilled.next(misfits);
  CHECK(third.batches[0].x.data_ptr() != misfits[0].x.data_ptr());  // 15 rows for a batch of 16
  CHECK(third.batches[1].x.data_ptr() != misfits[1].x.data_ptr());  // not contiguous
}

TEST_CASE("DeviceFeed: drop_last and the test split; a second feed shares the first one's GPU copy" *
          doctest::timeout(120)) {
  Fixture f;
  auto o = gpu_options();
  o.split = "test";
  o.batch_size = 64;
  o.drop_last = true;  // 500 / 128: 3 steps, 116 samples dropped
  feed::DeviceFeed a(f.cache, o);
  CHECK(a.length() == 3);
  test::check_epochs(a, feed::describe_feed(f.cache, o), o, 0, 2);
  o.drop_last = false;
  feed::DeviceFeed b(f.cache, o);
  CHECK(b.length() == 4);
  test::check_epochs(b, feed::describe_feed(f.cache, o), o, 0, 1);
}

TEST_CASE("DeviceFeed and HostFeed on the GPU give the same batches for the same options") {
  Fixture f;
  auto o = gpu_options();
  feed::DeviceFeed device(f.cache, o);
  feed::HostFeed host(f.cache, o);
  for (int i = 0; i < 10; ++i) {
    auto a = device.next(), b = host.next();
    for (std::uint32_t c = 0; c < o.consumers; ++c) {
      CHECK(torch::equal(a.batches[c].y, b.batches[c].y));
      CHECK(torch::allclose(a.batches[c].x, b.batches[c].x));
    }
  }
}

TEST_CASE("float32 samples and targets: DeviceFeed and HostFeed on the GPU hold the cache's values, normalised" *
          doctest::timeout(120)) {
  Fixture f(feed::SyntheticKind::regression);
  auto o = gpu_options();
  feed::DeviceFeed device(f.cache, o);
  test::check_epochs(device, feed::describe_feed(f.cache, o), o, 0, 1);
  feed::HostFeed host(f.cache, o);
  REQUIRE(host.on_gpu());
  test::check_epochs(host, feed::describe_feed(f.cache, o), o, 0, 1);
}

#else

TEST_CASE("the GPU feed tests need LibTorch with CUDA") {
  FAIL("a GPU is visible but this build's LibTorch has no CUDA: rebuild against LibTorch with CUDA");
}

#endif
