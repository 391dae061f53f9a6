// The segment fuzz targets' seed corpora (tests/fuzz/corpus/*_attach, written by
// tests/fuzz/make_segment_seeds.py) read through the same loader the targets use: the valid seed of
// each kind must attach and read (else the fuzzer starts from refusals only), every crafted one must
// be refused with a UserError, and nothing stays in /dev/shm.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>

#include "common/error.hpp"
#include "shm/control_block.hpp"
#include "shm/node_group.hpp"
#include "shm/dataset_cache.hpp"
#include "shm/weight_slab.hpp"
#include "tests/fuzz/segment_input.hpp"
#include "tests/harness.hpp"

using namespace tandem;

namespace {

void check_corpus(const std::string& target, const std::string& segment, shm::Kind kind, std::uint32_t layout,
                  const std::function<void()>& attach_and_read) {
  const auto folder = std::filesystem::path(test::source_root()) / "tests/fuzz/corpus" / target;
  int seeds = 0;
  for (const auto& entry : std::filesystem::directory_iterator(folder)) {
    std::ifstream in(entry.path(), std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), {});
    CAPTURE(entry.path().string());
    {
      fuzz::SegmentFromBytes object(segment, kind, layout, reinterpret_cast<const std::uint8_t*>(bytes.data()),
                                    bytes.size());
      const std::string error = test::error_of(attach_and_read);
      if (entry.path().filename().string().starts_with("valid")) CHECK(error.empty());
      else CHECK_FALSE(error.empty());
    }
    CHECK_FALSE(shm::Segment::exists(segment));
    ++seeds;
  }
  CHECK(seeds >= 4);
}

}  // namespace

TEST_CASE("segment fuzz seeds: the valid dataset cache attaches, every crafted one is refused") {
  const std::string name = fuzz::own_name();
  check_corpus("dataset_cache_attach", shm::dataset_segment_name(name), shm::Kind::dataset, shm::kDatasetLayoutVersion,
               [&] {
    auto cache = shm::DatasetCache::attach(name);
    CHECK(cache.split("test").end == 10);
    static_cast<void>(cache.compute_checksum(1));
  });
}

TEST_CASE("segment fuzz seeds: the valid weight slab attaches and leases version 1, every crafted one is refused") {
  const std::string name = shm::job_segment_name(fuzz::own_name(), shm::Kind::weights);
  check_corpus("weight_slab_attach", name, shm::Kind::weights, shm::kWeightSlabLayoutVersion, [&] {
    auto reader = shm::WeightSlabReader::attach(name);
    auto lease = reader.lease_latest();
    REQUIRE(lease);
    CHECK(lease->version() == 1);
    CHECK(lease->bytes() == 4096);
  });
}

TEST_CASE("segment fuzz seeds: the valid node reduce group attaches as rank 1, every crafted one is refused") {
  const std::string name = shm::reduce_segment_name(fuzz::own_name(), 1, false);
  check_corpus("node_group_attach", name, shm::Kind::reduce, shm::kReduceLayoutVersion, [&] {
    shm::NodeGroup group = shm::NodeGroup::attach(name, 1, 2);
    CHECK(group.world() == 2);
    // With rank 0's lane crafted far ahead, the barriers pass and the sums run through the buffers.
    if (group.join(std::chrono::milliseconds(0))) {
      float values[3000];
      std::fill(std::begin(values), std::end(values), 1.0f);
      REQUIRE(group.all_reduce_sum(values, 3000, 1.0f, std::chrono::milliseconds(0)));
      CHECK(values[2999] == 1.0f);    // rank 0's part of the buffers is zero: the sum is ours
      if (group.slot_floats() > 0) {  // rank 0 never started a slots op: ours waits for it, in vain
        const auto op = group.start_slots(0, group.slot_floats(), 1.0f);
        CHECK(group.finish_slots(op, std::chrono::milliseconds(0)).status ==
              shm::NodeGroup::Outcome::Status::timed_out);
      }
    }
  });
}

TEST_CASE("segment fuzz seeds: the valid control block attaches, every crafted one is refused") {
  const std::string job = fuzz::own_name();
  check_corpus("control_block_attach", shm::job_segment_name(job, shm::Kind::control), shm::Kind::control,
               shm::kControlLayoutVersion, [&] {
                 auto block = shm::ControlBlock::attach(job, shm::Segment::Access::read_only);
                 CHECK(block.row_count() == 2);
                 CHECK(block.snapshot(1).name() == "actor.0");
               });
}
