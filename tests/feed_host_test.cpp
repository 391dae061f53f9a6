// HostFeed on the CPU (learner/feed/host_feed.hpp), and DeviceFeed's refusal without a GPU.
#include "tests/torch_doctest.hpp"

#include <chrono>
#include <limits>
#include <future>
#include <set>
#include <thread>
#include <tuple>

#include "common/error.hpp"
#include "common/process.hpp"
#include "learner/feed/device_feed.hpp"
#include "learner/feed/host_feed.hpp"
#include "shm/dataset_cache.hpp"
#include "shm/segment.hpp"
#include "tests/feed_expect.hpp"
#include "tests/harness.hpp"

using namespace tandem;
using feed::FeedOptions;
using feed::HostFeed;

namespace {

struct Fixture {
  // 1000 train + 200 test samples of 3x4x5 bytes (60: a multiple of 4) unless told otherwise.
  explicit Fixture(std::vector<std::uint64_t> shape = {3, 4, 5},
                   feed::SyntheticKind kind = feed::SyntheticKind::classification)
      : data(test::unique_name("feedtest"), 1000, 200, std::move(shape), kind),
        cache(shm::DatasetCache::attach(data.name())) {}
  feed::SyntheticDataset data;
  shm::DatasetCache cache;
};

FeedOptions cpu_options() {
  FeedOptions o;
  o.placement = feed::Placement::cpu;
  o.batch_size = 32;
  o.consumers = 2;
  o.seed = 3;
  o.device_index = 1;
  o.mean = {0.1f, 0.2f, 0.3f};
  o.stddev = {0.5f, 0.25f, 2.0f};
  o.workers = 3;
  o.ring_slots = 3;
  return o;
}

}  // namespace

TEST_CASE("HostFeed on the CPU: batches hold the dataset's bytes, normalised, for the sampler's indices in order" *
          doctest::timeout(60)) {
  Fixture f;
  auto o = cpu_options();
  HostFeed feed(f.cache, o, /*first_epoch=*/5);
  CHECK_FALSE(feed.on_gpu());
  CHECK(feed.length() == 16);  // 1000 / 64 rounded up: the last step has 40 samples, 20 per consumer
  test::check_epochs(feed, feed.layout(), o, 5, 3);
}

TEST_CASE("HostFeed on the CPU: one mean/stddev for all channels, odd sample sizes, the test split" *
          doctest::timeout(60)) {
  Fixture f({1, 3, 3});
  auto o = cpu_options();
  o.split = "test";
  o.mean = {0.5f};
  o.stddev = {0.5f};
  o.consumers = 3;
  o.batch_size = 7;
  HostFeed feed(f.cache, o);
  CHECK(feed.layout().begin == 1000);
  test::check_epochs(feed, feed.layout(), o, 0, 2);
}

TEST_CASE("HostFeed on the CPU: float32 samples are normalised without the 1/255, float32 targets keep their shape" *
          doctest::timeout(60)) {
  Fixture f({3, 4, 5}, feed::SyntheticKind::regression);
  auto o = cpu_options();
  o.consumers = 3;
  o.batch_size = 9;
  HostFeed feed(f.cache, o);
  CHECK(feed.layout().scale[1] == doctest::Approx(1.0 / 0.25));  // (x - 0.2) / 0.25
  CHECK(feed.layout().y_shape == std::vector<std::int64_t>{2});
  test::check_epochs(feed, feed.layout(), o, 0, 2);
}

TEST_CASE("a feed refuses a cache whose x or y it cannot read, in one line naming the field and the fix") {
  for (const auto& [x_type, y_type, words] :
       {std::tuple{shm::DType::f64, shm::DType::i64, "field 'x' is float64: the feeds read uint8 or float32"},
        std::tuple{shm::DType::u8, shm::DType::i32, "field 'y' is int32: the feeds read int64 labels or float32"}}) {
    const std::string name = test::unique_name("feedtype");
    auto w = shm::DatasetWriter::create({.name = name,
                                         .source = "generated",
                                         .format = "test",
                                         .num_samples = 64,
                                         .fields = {{"x", x_type, {4}}, {"y", y_type, {}}},
                                         .splits = {{"train", 0, 64}}},
                                        false);
    w.commit(0, 1);
    const auto cache = shm::DatasetCache::attach(name);
    CHECK_THROWS_WITH_AS(HostFeed(cache, cpu_options()), doctest::Contains(words), UserError);
    shm::Segment::unlink(shm::dataset_segment_name(name));
  }
}

TEST_CASE("a feed refuses options no staging ring can hold, naming each before anything is allocated") {
  Fixture f;  // 1000 training samples
  auto refused = [&](FeedOptions o) { return test::error_of([&] { HostFeed feed(f.cache, o); }); };
  auto o = cpu_options();
  o.batch_size = std::uint64_t{1} << 40;  // was std::bad_alloc
  CHECK(refused(o).find("feed batch_size=1099511627776 is out of range: rank 0 of 1 reads 1000 samples") !=
        std::string::npos);
  o.batch_size = ~std::uint64_t{0};  // batch_size x consumers wraps
  CHECK(refused(o).find("use batch_size 1..500 with 2 consumer(s)") != std::string::npos);
  o = cpu_options();
  o.consumers = 1001;
  CHECK(refused(o).find("feed consumers=1001 is out of range") != std::string::npos);
  o = cpu_options();
  o.ring_slots = 1u << 30;
  CHECK(refused(o).find("HostFeed ring_slots=1073741824 is out of range: use 2..64") != std::string::npos);
  o = cpu_options();
  o.workers = 1u << 20;
  CHECK(refused(o).find("HostFeed workers=1048576 is out of range: use 0..256") != std::string::npos);
  o = cpu_options();
  o.mean = {0.1f, std::numeric_limits<float>::quiet_NaN(), 0.3f};
  CHECK(refused(o).find("feed mean[1] is nan: it must be a finite number") != std::string::npos);
}

TEST_CASE("HostFeed on the CPU: drop_last drops the short last step, and lengths match the sampler" *
          doctest::timeout(60)) {
  Fixture f;
  auto o = cpu_options();
  o.world_size = 3;
  o.rank = 1;  // shard of 333
  o.batch_size = 50;
  o.consumers = 2;
  o.drop_last = true;
  {
    HostFeed feed(f.cache, o);
    CHECK(feed.length() == 3);
    test::check_epochs(feed, feed.layout(), o, 0, 2);
  }
  o.drop_last = false;
  HostFeed feed(f.cache, o);
  CHECK(feed.length() == 4);
  for (int i = 0; i < 3; ++i) feed.next();
  auto last = feed.next();
  CHECK(last.batches[0].y.size(0) == 16);  // 33 samples split 16 / 17
  CHECK(last.batches[1].y.size(0) == 17);
  CHECK(feed.next().index == 0);
}

TEST_CASE("HostFeed on the CPU: ranks read disjoint shards that each cover floor(N / world) samples" *
          doctest::timeout(60)) {
  Fixture f;
  auto o = cpu_options();
  o.world_size = 3;
  std::set<std::int64_t> seen;
  for (std::uint32_t rank = 0; rank < 3; ++rank) {
    o.rank = rank;
    o.device_index = rank;
    HostFeed feed(f.cache, o);
    std::int64_t mine = 0;
    for (std::uint64_t i = 0; i < feed.length(); ++i)
      for (const auto& b : feed.next().batches) {
        auto y = b.y.contiguous();
        for (std::int64_t k = 0; k < y.size(0); ++k) CHECK(seen.insert(y.data_ptr<std::int64_t>()[k]).second);
        mine += y.size(0);
      }
    CHECK(mine == 333);
  }
  CHECK(seen.size() == 999);
}

TEST_CASE("HostFeed on the CPU: consumers' batches share no storage" * doctest::timeout(60)) {
  Fixture f;
  auto o = cpu_options();
  o.consumers = 4;
  o.batch_size = 5;
  HostFeed feed(f.cache, o);
  for (int i = 0; i < 20; ++i) {
    auto step = feed.next();
    CHECK(step.batches.size() == 4);
    CHECK(test::storage_disjoint(step));
    for (const auto& b : step.batches) CHECK(b.x.storage().data() != nullptr);
  }
}

TEST_CASE("HostFeed on the CPU: a batch still held is never rewritten while the feed moves on" * doctest::timeout(60)) {
  Fixture f;
  auto o = cpu_options();
  o.ring_slots = 3;
  o.consumers = 1;
  HostFeed feed(f.cache, o);
  const auto order = feed.sampler().epoch_order(0);
  auto held = feed.next();
  const auto held_rows = test::rows_of(order, 0, 32, 0, 1);
  // Two more steps pass through the other slots; the workers would like to refill step 0's slot.
  for (int i = 0; i < 2; ++i) feed.next();
  test::check_batch(feed.layout(), held.batches[0], held_rows);
  // A view outliving the step keeps the slot too: the next step, which needs that slot, waits for it.
  auto view = held.batches[0].x.narrow(0, 1, 4);
  held = {};
  std::promise<void> entered, taken;
  std::thread later([&] {
    entered.set_value();
    feed.next();
    taken.set_value();
  });
  auto taken_future = taken.get_future();
  REQUIRE(entered.get_future().wait_for(std::chrono::seconds(30)) == std::future_status::ready);
  CHECK(torch::allclose(view, test::expected_x(feed.layout(), {held_rows.begin() + 1, held_rows.begin() + 5})));
  CHECK(taken_future.wait_for(std::chrono::seconds(0)) == std::future_status::timeout);
  view = torch::Tensor();
  CHECK(taken_future.wait_for(std::chrono::seconds(30)) == std::future_status::ready);  // the release frees it
  later.join();
  for (int i = 0; i < 40; ++i) feed.next();  // released slots keep the ring turning
}

TEST_CASE("HostFeed: batches outlive the feed that made them" * doctest::timeout(60)) {
  Fixture f;
  auto o = cpu_options();
  feed::Step step;
  std::vector<std::int64_t> rows;
  {
    HostFeed feed(f.cache, o);
    rows = test::rows_of(feed.sampler().epoch_order(0), 0, 64, 1, 2);
    step = feed.next();
  }
  test::check_batch(feed::describe_feed(f.cache, o), step.batches[1], rows);
}

TEST_CASE("HostFeed: bad options are one-line errors that name the fix" * doctest::timeout(60)) {
  Fixture f;
  auto o = cpu_options();
  o.mean = {0.0f, 0.0f};
  o.stddev = {1.0f, 1.0f};
  CHECK_THROWS_WITH_AS(HostFeed(f.cache, o), doctest::Contains("have 2 values but dataset"), UserError);
  o = cpu_options();
  o.stddev = {1.0f, 0.0f, 1.0f};
  CHECK_THROWS_WITH_AS(HostFeed(f.cache, o), doctest::Contains("stddev[1] is 0"), UserError);
  o = cpu_options();
  o.batch_size = 600;
  o.drop_last = true;
  CHECK_THROWS_WITH_AS(HostFeed(f.cache, o), doctest::Contains("turn drop_last off"), UserError);
  o = cpu_options();
  o.split = "validation";
  CHECK_THROWS_WITH_AS(HostFeed(f.cache, o), doctest::Contains("has no split 'validation'"), UserError);
  o = cpu_options();
  o.ring_slots = 1;
  CHECK_THROWS_WITH_AS(HostFeed(f.cache, o), doctest::Contains("ring_slots=1 is out of range"), UserError);
}

// With CUDA_VISIBLE_DEVICES empty even a GPU machine shows none, so the refusal is checked everywhere.
TANDEM_CHILD("device feed without a gpu") {
  Fixture f;
  feed::DeviceFeed feed(f.cache, cpu_options());
  return 0;
}

TEST_CASE("DeviceFeed without a GPU fails with one line saying it needs one" * doctest::timeout(60)) {
  const test::CommandResult r = test::run_command("CUDA_VISIBLE_DEVICES= " + self_exe().string() +
                                                  " '--tandem-child=device feed without a gpu'");
  INFO(r.output);
  CHECK(r.status == 1);
  CHECK(r.output.starts_with("test-child: DeviceFeed needs a CUDA GPU and "));
  CHECK(r.output.find('\n') == r.output.size() - 1);
}
