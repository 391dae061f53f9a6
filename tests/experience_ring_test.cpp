// Experience rings in one process: order, wraparound and checksums, backpressure, refusals of
// corrupt slots and crafted descriptors, and the numpy reader of tools/tandem_shm.py.
#include <doctest/doctest.h>

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>

#include "common/error.hpp"
#include "shm/experience_ring.hpp"
#include "tests/experience_ring_fill.hpp"
#include "tests/fuzz/segment_input.hpp"
#include "tests/case_check.hpp"
#include "tests/harness.hpp"

using namespace tandem;
using shm::ExperienceDescriptor;
using shm::ExperienceRings;
using shm::ExperienceWriter;

namespace {

shm::ExperienceShape small_shape() {
  shm::ExperienceShape s;
  s.num_actors = 2;
  s.slots_per_ring = 3;
  s.steps = 5;
  s.envs = 3;
  s.obs_dim = 4;
  s.logits_dim = 2;
  return s;
}

std::uint64_t write_one(ExperienceWriter& w) {
  auto slot = w.begin_write();
  REQUIRE(slot);
  test::fill_slot(*slot, w.descriptor(), slot->index());
  w.commit(*slot);
  return slot->index();
}

// Edits the descriptor of a live segment and re-signs the header, as a crafted segment would be.
void craft(const std::string& segment, const std::function<void(ExperienceDescriptor&)>& edit) {
  shm::Segment seg = shm::Segment::attach(segment, shm::Kind::experience, shm::kExperienceLayoutVersion,
                                          shm::Segment::Access::read_write, "");
  edit(seg.descriptor_as<ExperienceDescriptor>());
  seg.header().header_checksum = shm::header_checksum(seg.base());
}

}  // namespace

TEST_CASE("experience rings: slots come out in commit order with matching checksums, across wraparound") {
  const std::string job = test::unique_name("exp");
  ExperienceRings rings = ExperienceRings::create(job, small_shape());
  ExperienceWriter a0 = ExperienceWriter::attach(job, 0);
  ExperienceWriter a1 = ExperienceWriter::attach(job, 1);
  const ExperienceDescriptor& d = rings.descriptor();
  CHECK(d.max_episodes == 15);
  CHECK(d.slot_stride % 64 == 0);
  for (std::uint64_t off :
       {d.observations_offset, d.actions_offset, d.rewards_offset, d.terminated_offset, d.truncated_offset,
        d.log_probs_offset, d.logits_offset, d.values_offset, d.episode_returns_offset, d.episode_lengths_offset,
        d.final_observations_offset, d.slots_offset, d.rings_offset})
    CHECK(off % 64 == 0);
  CHECK_FALSE(rings.peek(0));
  std::uint64_t consumed = 0;
  for (int round = 0; round < 10; ++round) {  // 10 x 2 slots through 3-slot rings: wraps several times
    CHECK(write_one(a0) == consumed);
    CHECK(write_one(a0) == consumed + 1);
    CHECK(write_one(a1) == static_cast<std::uint64_t>(round));
    for (int k = 0; k < 2; ++k, ++consumed) {
      auto slot = rings.peek(0);
      REQUIRE(slot);
      CHECK(slot->index() == consumed);
      CHECK(rings.verify(0, *slot));
      CHECK(test::slot_holds(*slot, d, consumed));
      rings.release(0);
    }
    auto other = rings.peek(1);
    REQUIRE(other);
    CHECK(rings.verify(1, *other));
    CHECK(test::slot_holds(*other, d, static_cast<std::uint64_t>(round)));
    rings.release(1);
    CHECK_FALSE(rings.peek(0));
    CHECK_FALSE(rings.peek(1));
  }
  CHECK(rings.ring(0).head.load() == 20);
  CHECK(rings.ring(0).tail.load() == 20);
  CHECK(rings.ring(0).refused.load() == 0);
  CHECK(rings.ring(0).full_waits.load() == 0);
}

TEST_CASE("experience rings: a full ring refuses begin_write and counts each wait until the learner releases") {
  const std::string job = test::unique_name("exp");
  ExperienceRings rings = ExperienceRings::create(job, small_shape());
  ExperienceWriter w = ExperienceWriter::attach(job, 1);
  for (int i = 0; i < 3; ++i) write_one(w);
  CHECK_FALSE(w.begin_write());
  CHECK_FALSE(w.begin_write());
  CHECK(rings.ring(1).full_waits.load() == 2);
  CHECK(rings.ring(0).full_waits.load() == 0);
  auto slot = rings.peek(1);
  REQUIRE(slot);
  CHECK(rings.verify(1, *slot));
  rings.release(1);
  CHECK(write_one(w) == 3);  // the released slot is reused for index 3
  CHECK_FALSE(w.begin_write());
  CHECK(rings.ring(1).full_waits.load() == 3);
}

TEST_CASE("experience rings: a slot changed after commit fails verify and is counted, a good one is not") {
  const std::string job = test::unique_name("exp");
  ExperienceRings rings = ExperienceRings::create(job, small_shape());
  ExperienceWriter w = ExperienceWriter::attach(job, 0);
  write_one(w);
  write_one(w);
  auto slot = rings.peek(0);
  REQUIRE(slot);
  slot->rewards()[7] += 1.0f;  // one float of the payload
  CHECK_FALSE(rings.verify(0, *slot));
  CHECK(rings.ring(0).refused.load() == 1);
  rings.release(0);
  slot = rings.peek(0);
  REQUIRE(slot);
  slot->header().seq = 5;  // a whole slot, but not the one this position was committed as
  CHECK_FALSE(rings.verify(0, *slot));
  CHECK(rings.ring(0).refused.load() == 2);
}

TEST_CASE("experience rings: a restarted writer reattaches at head, is counted, and marks its first slot") {
  const std::string job = test::unique_name("exp");
  ExperienceRings rings = ExperienceRings::create(job, small_shape());
  {
    ExperienceWriter w = ExperienceWriter::attach(job, 0);
    write_one(w);
    auto half = w.begin_write();  // begun and never committed: the writer "dies" here
    REQUIRE(half);
    half->rewards()[0] = 1234.0f;
  }
  CHECK(rings.ring(0).head.load() == 1);
  ExperienceWriter again = ExperienceWriter::attach(job, 0);
  CHECK(rings.ring(0).writer_attaches.load() == 2);
  CHECK(write_one(again) == 1);
  CHECK(write_one(again) == 2);
  for (std::uint64_t i = 0; i < 3; ++i) {
    auto slot = rings.peek(0);
    REQUIRE(slot);
    CHECK(rings.verify(0, *slot));
    CHECK(test::slot_holds(*slot, rings.descriptor(), i));
    // The first slot of each writer: a learner restarts that actor's per-env running sums there.
    CHECK(slot->header().writer_start == (i == 2 ? 0u : 1u));
    rings.release(0);
  }
}

TEST_CASE("experience rings: create refuses a shape it cannot lay out, naming the field, and leaves nothing") {
  const std::string job = test::unique_name("exp");
  struct Case {
    std::string expect;
    std::function<void(shm::ExperienceShape&)> edit;
  };
  const Case cases[] = {
      {"steps is 0", [](auto& s) { s.steps = 0; }},
      {"num_actors is 5000", [](auto& s) { s.num_actors = 5000; }},
      {"action_dim of discrete actions is 3", [](auto& s) { s.action_dim = 3; }},
      {"a slot would exceed", [](auto& s) { s.steps = s.envs = 1u << 10, s.obs_dim = 1u << 20; }},
      {"steps x envs is", [](auto& s) { s.steps = s.envs = 1u << 20; }},
  };
  for (const auto& c : cases) {
    shm::ExperienceShape shape = small_shape();
    c.edit(shape);
    const std::string error = test::error_of([&] { (void)ExperienceRings::create(job, shape); });
    CAPTURE(error);
    CHECK(error.find(c.expect) != std::string::npos);
    CHECK(error.find(job) != std::string::npos);
    CHECK_FALSE(shm::Segment::exists(shm::job_segment_name(job, shm::Kind::experience)));
  }
}

TEST_CASE("experience rings: attach refuses every crafted descriptor field with one line naming the segment") {
  const std::string job = test::unique_name("exp");
  ExperienceRings rings = ExperienceRings::create(job, small_shape());
  const std::string& name = rings.segment_name();
  struct Case {
    std::string expect;
    std::function<void(ExperienceDescriptor&)> edit;
  };
  const Case cases[] = {
      {"steps is 0", [](auto& d) { d.steps = 0; }},
      {"action_kind is 7", [](auto& d) { d.action_kind = 7; }},
      {"slots_per_ring is 0", [](auto& d) { d.slots_per_ring = 0; }},
      {"slot_stride is", [](auto& d) { d.slot_stride += 64; }},
      {"observations_offset is", [](auto& d) { d.observations_offset = 0; }},
      {"episode_lengths_offset is", [](auto& d) { d.episode_lengths_offset += 64; }},
      {"slots_offset is", [](auto& d) { d.slots_offset = ~0ull; }},
      {"max_episodes", [](auto& d) { d.max_episodes = 1u << 31; }},
      {"ring_bytes", [](auto& d) { d.ring_bytes = 64; }},
      {"bytes but the segment has", [](auto& d) { d.slots_per_ring = 65536; }},
      {"a slot would exceed", [](auto& d) { d.envs = d.steps = 1u << 10, d.obs_dim = 1u << 20; }},
      {"steps x envs is", [](auto& d) { d.envs = d.steps = 1u << 20; }},
  };
  const ExperienceDescriptor good = rings.descriptor();
  for (const auto& c : cases) {
    craft(name, [&](ExperienceDescriptor& d) {
      d = good;
      c.edit(d);
    });
    const std::string error = test::error_of([&] { (void)ExperienceRings::attach(job); });
    CAPTURE(error);
    CHECK(error.find(c.expect) != std::string::npos);
    CHECK(error.find("'/" + name + "'") != std::string::npos);
    CHECK(error.find('\n') == std::string::npos);
    CHECK(error.find("learner creates the rings") != std::string::npos);
    CHECK_FALSE(test::error_of([&] { (void)ExperienceWriter::attach(job, 0); }).empty());
  }
  craft(name, [&](ExperienceDescriptor& d) { d = good; });
  CHECK(test::error_of([&] { (void)ExperienceRings::attach(job); }).empty());
  CHECK(test::error_of([&] { (void)ExperienceWriter::attach(job, 2); }).find("actor 2 has none") != std::string::npos);
}

TEST_CASE("experience rings: a head or tail no writer could produce is a UserError, never a wild read") {
  const std::string job = test::unique_name("exp");
  ExperienceRings rings = ExperienceRings::create(job, small_shape());
  rings.ring(0).head.store(4);  // 4 slots ahead of tail in a 3-slot ring
  CHECK(test::error_of([&] { (void)rings.peek(0); }).find("is corrupt") != std::string::npos);
  CHECK(test::error_of([&] { (void)ExperienceWriter::attach(job, 0); }).find("is corrupt") != std::string::npos);
  rings.ring(0).head.store(0);
  rings.ring(0).tail.store(1);  // tail past head
  CHECK(test::error_of([&] { (void)rings.peek(0); }).find("is corrupt") != std::string::npos);
}

TEST_CASE("tandem_shm.py reads an experience ring's slot with numpy exactly as C++ wrote it") {
  const std::string job = test::unique_name("exp");
  shm::ExperienceShape shape = small_shape();
  shape.action_kind = shm::ActionKind::continuous;
  shape.action_dim = 2;
  ExperienceRings rings = ExperienceRings::create(job, shape);
  ExperienceWriter w = ExperienceWriter::attach(job, 1);
  write_one(w);
  write_one(w);
  rings.release(1);  // the reader reads the slot at tail: index 1
  auto slot = rings.peek(1);
  REQUIRE(slot);
  const auto& d = rings.descriptor();
  const std::string script = fmt::format("{} {}/tools/tandem_shm.py --exp {} --slot 1", test::python_with_numpy(),
                                         test::source_root(), rings.segment_name());
  const test::CommandResult out = test::run_command(script);
  INFO(out.output);
  REQUIRE(out.status == 0);
  auto hex = [](const void* p, std::uint64_t n) {
    std::string s;
    for (std::uint64_t i = 0; i < n; ++i) s += fmt::format("{:02x}", static_cast<const unsigned char*>(p)[i]);
    return s;
  };
  const test::SlotCounts n = test::slot_counts(d);
  CHECK(out.output.find("\"seq\": 1,") != std::string::npos);
  CHECK(out.output.find("\"policy_version\": 1,") != std::string::npos);
  CHECK(out.output.find(fmt::format("\"head\": 2, \"tail\": 1")) != std::string::npos);
  CHECK(out.output.find(fmt::format("\"observations\": \"{}\"", hex(slot->observations(), n.obs * 4))) !=
        std::string::npos);
  CHECK(out.output.find(fmt::format("\"actions\": \"{}\"", hex(slot->continuous_actions(), n.actions * 4))) !=
        std::string::npos);
  CHECK(out.output.find(fmt::format("\"truncated\": \"{}\"", hex(slot->truncated(), n.steps))) != std::string::npos);
  CHECK(out.output.find(fmt::format("\"logits\": \"{}\"", hex(slot->logits(), n.logits * 4))) != std::string::npos);
  CHECK(out.output.find(fmt::format("\"values\": \"{}\"", hex(slot->values(), n.values * 4))) != std::string::npos);
  CHECK(out.output.find(fmt::format("\"episode_lengths\": \"{}\"", hex(slot->episode_lengths(), 4))) !=
        std::string::npos);
  CHECK(out.output.find("\"shape_observations\": [6, 3, 4]") != std::string::npos);
  CHECK(out.output.find("\"shape_actions\": [5, 3, 2]") != std::string::npos);
  // With the optional xxhash package, Python also recomputes the slot checksum from the document.
  if (test::run_command(fmt::format("{} -c 'import xxhash'", test::python_with_numpy())).status == 0)
    CHECK(out.output.find("\"checksum_ok\": true") != std::string::npos);
  else test::skip_case("python3-xxhash is not installed: the Python checksum recomputation was not tested");
}

TEST_CASE("experience ring fuzz seeds: the valid one attaches and yields its slot, every crafted one is refused") {
  const std::string job = test::unique_name("expseed");
  const std::string name = shm::job_segment_name(job, shm::Kind::experience);
  const auto folder = std::filesystem::path(test::source_root()) / "tests/fuzz/corpus/experience_ring_attach";
  int seeds = 0;
  for (const auto& entry : std::filesystem::directory_iterator(folder)) {
    std::ifstream in(entry.path(), std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), {});
    CAPTURE(entry.path().string());
    const bool valid = entry.path().filename() == "valid";
    {
      fuzz::SegmentFromBytes object(name, shm::Kind::experience, shm::kExperienceLayoutVersion,
                                    reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
      const std::string error = test::error_of([&] {
        ExperienceRings rings = ExperienceRings::attach(job);
        for (std::uint32_t a = 0; a < rings.descriptor().num_actors && a < 4; ++a) {
          auto slot = rings.peek(a);
          if (valid && a == 0) {
            REQUIRE(slot);
            CHECK(rings.verify(0, *slot));
            CHECK(slot->header().policy_version == 7);
          }
        }
        (void)ExperienceWriter::attach(job, 0);
      });
      CHECK(error.empty() == valid);
      if (!valid) CHECK(error.find("'/" + name + "'") != std::string::npos);
    }
    CHECK_FALSE(shm::Segment::exists(name));
    ++seeds;
  }
  CHECK(seeds >= 8);
}
