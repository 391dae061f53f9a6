// Weight slab and CPU publisher, single process: layout, leases, slot choice, misuse, errors.
#include <doctest/doctest.h>
#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <cstring>
#include <stdexcept>
#include <vector>

#include "common/clock.hpp"
#include "common/error.hpp"
#include "learner/publisher.hpp"
#include "shm/verify_pattern.hpp"
#include "shm/weight_slab.hpp"
#include "shm/weight_slab_layout.hpp"
#include "tests/harness.hpp"

using namespace tandem;
using shm::WeightSlabReader;
using shm::WeightSlabWriter;

namespace {

shm::SlabSpec spec_of(std::size_t bytes, std::uint32_t slots = 4) {
  shm::SlabSpec spec;
  spec.model = "test";
  spec.model_signature = 0x1234abcd5678ef00ull;
  spec.tensors = {{"w", shm::DType::f32, {bytes / 8}, 0, bytes / 2},
                  {"b", shm::DType::u8, {bytes / 2}, bytes / 2, bytes / 2}};
  spec.slot_bytes = bytes;
  spec.num_slots = slots;
  spec.num_leases = 8;
  return spec;
}

void publish(WeightSlabWriter& w, std::uint64_t version, std::size_t bytes) {
  auto slot = w.begin_write();
  REQUIRE(slot);
  shm::fill_verify_pattern(slot->data, bytes, version);
  w.commit(*slot, version, version * 10, bytes, monotonic_ns());
}

}  // namespace

TEST_CASE("weight slab: the descriptor, tensor table and slots sit where docs/FORMAT.md says") {
  std::string name = test::unique_name("tandem.test-slab");
  WeightSlabWriter w = WeightSlabWriter::create(name, spec_of(4096));
  WeightSlabReader r = WeightSlabReader::attach(name);
  const auto& d = r.descriptor();
  CHECK(std::string(d.model) == "test");
  CHECK(d.model_signature == 0x1234abcd5678ef00ull);
  CHECK(d.num_slots == 4);
  CHECK(d.control_offset == shm::kPayloadAlignment);
  CHECK(d.lease_offset == d.control_offset + 4096);
  CHECK(d.lease_bytes == 4096);
  CHECK(d.table_offset == d.lease_offset + d.lease_bytes);
  CHECK(d.slots_offset % shm::kSlotAlignment == 0);
  CHECK(d.slot_stride == shm::kSlotAlignment);
  REQUIRE(r.tensors().size() == 2);
  CHECK(std::string(r.tensors()[1].name) == "b");
  CHECK(r.tensors()[1].offset == 2048);
  CHECK(r.tensors()[0].shape[0] == 512);
  CHECK(r.latest_version() == 0);
  CHECK_FALSE(r.lease_latest());
}

TEST_CASE("weight slab: a leased version keeps its bytes while the writer publishes past it") {
  std::string name = test::unique_name("tandem.test-slab");
  WeightSlabWriter w = WeightSlabWriter::create(name, spec_of(1 << 16));
  WeightSlabReader r = WeightSlabReader::attach(name);
  publish(w, 1, 1 << 16);
  auto lease = r.lease_latest();
  REQUIRE(lease);
  CHECK(lease->version() == 1);
  CHECK(lease->step() == 10);
  for (std::uint64_t v = 2; v < 40; ++v) publish(w, v, 1 << 16);
  CHECK(r.latest_version() == 39);
  CHECK(lease->still_valid());
  CHECK(shm::check_verify_pattern(lease->data(), lease->bytes(), 1));
  lease->release();

  std::vector<std::byte> copy(1 << 16);
  auto c = r.copy_latest(copy.data());
  REQUIRE(c);
  CHECK(c->version == 39);
  CHECK(shm::check_verify_pattern(copy.data(), copy.size(), 39));
}

TEST_CASE("weight slab: the writer skips (and counts) instead of waiting when every other slot is leased") {
  std::string name = test::unique_name("tandem.test-slab");
  WeightSlabWriter w = WeightSlabWriter::create(name, spec_of(4096, 3));
  WeightSlabReader r1 = WeightSlabReader::attach(name, 1), r2 = WeightSlabReader::attach(name, 1);
  publish(w, 1, 4096);
  auto a = r1.lease_latest();
  publish(w, 2, 4096);
  auto b = r2.lease_latest();
  publish(w, 3, 4096);  // the third slot; now 1 and 2 are leased and 3 is the latest
  REQUIRE((a && b));
  CHECK_FALSE(w.begin_write());
  CHECK(w.stats().skipped == 1);
  CHECK_FALSE(r1.lease_latest());  // r1's only entry is in use
  a->release();
  auto slot = w.begin_write();
  REQUIRE(slot);
  CHECK(slot->index == a->slot());
  w.abort(*slot);
  CHECK(b->still_valid());
}

TEST_CASE(
    "weight slab: a reader that takes a dead owner's entry, pid and all, before the writer frees it keeps its lease") {
  // The race, one step at a time: the writer finds entry 0's owner dead; before it acts, a new reader
  // whose pid is the dead owner's (reused) claims the entry and leases a slot; then the writer acts on
  // the owner word it found dead (slab::reclaim_entry, reclaim_dead's step for one entry).
  std::string name = test::unique_name("tandem.test-slab");
  shm::SlabSpec spec = spec_of(4096, 2);
  spec.num_leases = 1;
  WeightSlabWriter w = WeightSlabWriter::create(name, spec);
  publish(w, 1, 4096);
  shm::Segment seg = shm::Segment::attach(name, shm::Kind::weights, shm::kWeightSlabLayoutVersion,
                                          shm::Segment::Access::read_write, "");
  shm::LeaseEntry& entry = shm::slab::leases_of(seg, seg.descriptor_as<shm::SlabDescriptor>())[0];
  const std::uint64_t self = shm::slab::own_owner_word();
  const std::uint64_t dead = self ^ (std::uint64_t{1} << 32);  // this pid, another start time
  entry.owner.store(dead);
  REQUIRE(shm::slab::owner_dead(dead));

  WeightSlabReader r = WeightSlabReader::attach(name, 1);  // takes entry 0: its owner is dead
  REQUIRE(entry.owner.load() == self);
  auto lease = r.lease_latest();
  REQUIRE(lease);
  CHECK_FALSE(shm::slab::reclaim_entry(entry, dead, self));
  CHECK(entry.owner.load() == self);
  CHECK(entry.lease.load() != 0);
  publish(w, 2, 4096);           // into the other slot
  CHECK_FALSE(w.begin_write());  // version 1's slot is leased, version 2's is the latest
  CHECK(lease->still_valid());
  CHECK(shm::check_verify_pattern(lease->data(), lease->bytes(), 1));
}

TEST_CASE("weight slab: the writer never rewrites the latest slot and rotates through the oldest") {
  std::string name = test::unique_name("tandem.test-slab");
  WeightSlabWriter w = WeightSlabWriter::create(name, spec_of(4096, 4));
  std::vector<std::uint32_t> used;
  for (std::uint64_t v = 1; v <= 8; ++v) {
    auto slot = w.begin_write();
    REQUIRE(slot);
    if (!used.empty()) CHECK(slot->index != used.back());
    used.push_back(slot->index);
    w.commit(*slot, v, v, 4096, 0);
  }
  for (int i = 4; i < 8; ++i) CHECK(used[i] == used[i - 4]);  // least recently written first
}

TEST_CASE("weight slab: misuse is refused: stale versions, commits without a write, bad specs") {
  std::string name = test::unique_name("tandem.test-slab");
  WeightSlabWriter w = WeightSlabWriter::create(name, spec_of(4096));
  publish(w, 5, 4096);
  auto slot = w.begin_write();
  REQUIRE(slot);
  CHECK_THROWS_AS(static_cast<void>(w.begin_write()), std::logic_error);
  CHECK_THROWS_AS(w.commit(*slot, 5, 0, 4096, 0), std::logic_error);
  w.abort(*slot);
  CHECK_THROWS_AS(w.commit(*slot, 6, 0, 4096, 0), std::logic_error);

  std::string bad = test::unique_name("tandem.test-slab");
  auto spec = spec_of(4096, 1);
  CHECK_THROWS_WITH_AS(WeightSlabWriter::create(bad, spec), doctest::Contains("slots asked for"), UserError);
  spec = spec_of(4096);
  spec.tensors[1].bytes = 1 << 20;
  CHECK_THROWS_WITH_AS(WeightSlabWriter::create(bad, spec), doctest::Contains("'b'"), UserError);
  CHECK_FALSE(shm::Segment::exists(bad));
  CHECK_THROWS_WITH_AS(WeightSlabWriter::create(name, spec_of(4096)), doctest::Contains("already exists"), UserError);
  CHECK_THROWS_WITH_AS(WeightSlabReader::attach(bad), doctest::Contains("does not exist"), UserError);
}

TEST_CASE("weight slab: a reader has its own lease entries and runs out of them clearly") {
  std::string name = test::unique_name("tandem.test-slab");
  auto spec = spec_of(4096);
  spec.num_leases = 3;
  WeightSlabWriter w = WeightSlabWriter::create(name, spec);
  WeightSlabReader a = WeightSlabReader::attach(name, 2);
  CHECK_THROWS_WITH_AS(WeightSlabReader::attach(name, 2), doctest::Contains("no free lease entry"), UserError);
  { WeightSlabReader b = WeightSlabReader::attach(name, 1); }
  WeightSlabReader c = WeightSlabReader::attach(name, 1);  // b's entry came back
  CHECK(c.lease_table().size() == 3);
}

constexpr int kFaulted = 42;

TANDEM_CHILD("scribble") {
  auto r = WeightSlabReader::attach(test::child_args().at(0));
  struct sigaction sa {};
  sa.sa_handler = [](int) { ::_exit(kFaulted); };  // ours, not the sanitizer's: the same status in every build
  ::sigaction(SIGSEGV, &sa, nullptr);
  const_cast<std::byte*>(r.slot_data(0))[0] = std::byte{1};  // must fault: readers map slots read-only
  return 0;
}

TEST_CASE("weight slab: a reader that writes into a slot faults instead of corrupting the weights") {
  std::string name = test::unique_name("tandem.test-slab");
  WeightSlabWriter w = WeightSlabWriter::create(name, spec_of(4096));
  CHECK(test::spawn_child("scribble", {name}).wait() == kFaulted);
}

TEST_CASE("publisher: the CPU path copies the source into a slot, and skips when no slot is free") {
  std::string name = test::unique_name("tandem.test-slab");
  WeightSlabWriter w = WeightSlabWriter::create(name, spec_of(1 << 16, 2));
  std::vector<std::byte> params(1 << 16);
  learner::PublisherOptions every5;
  every5.every_steps = 5;
  learner::Publisher pub(w, learner::PublishSource::host(params.data(), params.size()), every5);
  WeightSlabReader r = WeightSlabReader::attach(name, 1);

  shm::fill_verify_pattern(params.data(), params.size(), pub.next_version());
  auto res = pub.maybe_publish(0);
  CHECK(res.outcome == learner::Publisher::Outcome::committed);
  CHECK(pub.maybe_publish(3).outcome == learner::Publisher::Outcome::not_due);
  shm::fill_verify_pattern(params.data(), params.size(), pub.next_version());
  CHECK(pub.maybe_publish(5).outcome == learner::Publisher::Outcome::committed);
  auto lease = r.lease_latest();
  REQUIRE(lease);
  CHECK(lease->version() == 2);
  CHECK(lease->step() == 5);
  CHECK(shm::check_verify_pattern(lease->data(), lease->bytes(), 2));
  CHECK(pub.publish(6).outcome == learner::Publisher::Outcome::committed);  // into the other slot
  // Two slots: one is the latest, the other leased: the publish is skipped, not waited for.
  CHECK(pub.publish(7).outcome == learner::Publisher::Outcome::skipped);
  CHECK(pub.stats().skipped == 1);
  lease->release();
  CHECK(pub.publish(8).outcome == learner::Publisher::Outcome::committed);
  CHECK(r.latest_version() == 5);  // version 4 was the skipped one: versions stay strictly increasing
  CHECK(pub.take_timings().size() == 4);
}

TEST_CASE("verify pattern: a copy mixing two versions fails the check") {
  std::vector<std::byte> a(1 << 20), b(1 << 20);
  shm::fill_verify_pattern(a.data(), a.size(), 7);
  shm::fill_verify_pattern(b.data(), b.size(), 8);
  CHECK(shm::check_verify_pattern(a.data(), a.size(), 7));
  std::memcpy(a.data() + 4096, b.data() + 4096, 4096);
  CHECK_FALSE(shm::check_verify_pattern(a.data(), a.size(), 7));
  CHECK(shm::verify_byte(7) != shm::verify_byte(8));
}

TEST_CASE("weight slab: the numpy reader written from docs/FORMAT.md reads the latest version intact") {
  std::string name = test::unique_name("tandem.test-slab");
  WeightSlabWriter w = WeightSlabWriter::create(name, spec_of(1 << 16));
  for (std::uint64_t v = 1; v <= 6; ++v) publish(w, v, 1 << 16);
  auto r = test::run_command(fmt::format("{} {}/tools/tandem_shm.py --weights {} --verify", test::python_with_numpy(),
                                         test::source_root(), name));
  INFO(r.output);
  CHECK(r.status == 0);
  CHECK(r.output.find("version 6 step 60 bytes 65536") != std::string::npos);
  CHECK(r.output.find("verify pattern ok") != std::string::npos);
  CHECK(r.output.find("signature 1234abcd5678ef00") != std::string::npos);
}
