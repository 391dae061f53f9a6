// Hand-made segments: a dataset cache, weight slab or control block whose descriptor lies (sizes that
// wrap, offsets outside the mapping, counts past their tables, a `latest` naming a slot that does
// not exist). Each is made valid first, then patched and re-checksummed, so only the lie is wrong:
// every attach must refuse it with one line naming the segment and the fix, and the tools must exit
// 1..125 without reading outside the mapping or allocating without bound.
#include <doctest/doctest.h>

#include <atomic>
#include <cstring>
#include <functional>

#include "common/error.hpp"
#include "shm/control_block.hpp"
#include "shm/dataset_cache.hpp"
#include "shm/weight_slab.hpp"
#include "tests/harness.hpp"
#include "tests/sanitizer.hpp"

using namespace tandem;
using shm::DatasetDescriptor;
using shm::Segment;
using test::error_of;

namespace {

// Opens `name` read-write, lets `patch` edit it, and re-signs the header so only the edit is wrong.
void patch_segment(const std::string& name, shm::Kind kind, std::uint32_t layout,
                   const std::function<void(Segment&)>& patch) {
  Segment s = Segment::attach(name, kind, layout, Segment::Access::read_write, "");
  patch(s);
  s.header().header_checksum = shm::header_checksum(s.base());
}

// A valid 10-sample cache (x: 4 bytes, y: a scalar label), removed with this handle.
struct Cache {
  std::string name = test::unique_name("hostile");
  Cache() {
    shm::DatasetSpec spec{name,
                          "test",
                          "synthetic",
                          10,
                          {{"x", shm::DType::u8, {4}}, {"y", shm::DType::u8, {}}},
                          {{"train", 0, 8}, {"test", 8, 10}}};
    auto w = shm::DatasetWriter::create(spec, false);
    std::memset(w.field_data(0), 7, 40);
    std::memset(w.field_data(1), 3, 10);
    w.commit(0, 1);
  }
  ~Cache() { Segment::unlink(shm::dataset_segment_name(name)); }
  void patch(const std::function<void(DatasetDescriptor&)>& edit) const {
    patch_segment(shm::dataset_segment_name(name), shm::Kind::dataset, shm::kDatasetLayoutVersion,
                  [&](Segment& s) { edit(s.descriptor_as<DatasetDescriptor>()); });
  }
};

// The clean outcome through the binary: an exit in 1..125 and one line naming the cache and the fix.
void check_refused(const std::string& command, const std::string& name) {
  const auto r = test::run_command(command);
  INFO(command, "\n", r.output);
  CHECK(r.status >= 1);
  CHECK(r.status <= 125);
  CHECK(r.output.find('\n') == r.output.size() - 1);
  CHECK(r.output.find(name) != std::string::npos);
  CHECK(r.output.find("tandem data rm " + name) != std::string::npos);
}

// A command prefix that bounds memory to 1 GiB. Under ASan, whose shadow reserves terabytes of
// address space, RLIMIT_AS cannot be used: its allocator's own limit stands in.
constexpr const char* kBoundedMemory = test::kAddressSanitizer
                                           ? "ASAN_OPTIONS=$ASAN_OPTIONS:max_allocation_size_mb=1024 "
                                           : "prlimit --as=1073741824 ";

struct BadCache {
  const char* what;
  std::function<void(DatasetDescriptor&)> edit;
};

const BadCache kBadCaches[] =
    {
        {"stride x num_samples wraps to the byte count",
         [](DatasetDescriptor& d) {
  d.num_samples = 1ull << 61;
  d.fields[0].shape[0] = 8;
  d.fields[0].stride = 8;
  d.fields[0].bytes = 0;  // 8 * 2^61 mod 2^64
  d.fields[1].bytes = 1ull << 61;
         }},
        {"field offset + bytes wraps", [](DatasetDescriptor& d) { d.fields[0].offset = ~0ull - (2u << 20) + 1; }},
        {"ndim past the shape table", [](DatasetDescriptor& d) { d.fields[0].ndim = 1000; }},
        {"unknown dtype", [](DatasetDescriptor& d) { d.fields[1].dtype = static_cast<shm::DType>(99); }},
        {"consistent sizes far past the mapping",
         [](DatasetDescriptor& d) {
  d.num_samples = 1ull << 40;
  d.fields[0].bytes = 4ull << 40;
  d.fields[1].bytes = 1ull << 40;
         }},
               {"num_fields past the field table", [](DatasetDescriptor& d) { d.num_fields = 9; }},
               {"train split past the end", [](DatasetDescriptor& d) { d.splits[0].end = 75000; }},
               {"reversed split", [](DatasetDescriptor& d) { d.splits[0].begin = 5, d.splits[0].end = 3; }},
               };

}  // namespace

TEST_CASE("dataset cache: a descriptor whose sizes, offsets, counts or splits lie is refused at attach") {
  for (const auto& bad : kBadCaches) {
    CAPTURE(bad.what);
    Cache cache;
    CHECK(error_of([&] { shm::DatasetCache::attach(cache.name); }).empty());
    cache.patch(bad.edit);
    const std::string error = error_of([&] { shm::DatasetCache::attach(cache.name); });
    CHECK(error.find("dataset cache '" + cache.name + "' is invalid") != std::string::npos);
    CHECK(error.find("tandem data rm " + cache.name) != std::string::npos);
  }
}

TEST_CASE("dataset cache: tandem data info and verify refuse a lying cache in one line, in bounded memory") {
  const std::string tandem = test::tandem_binary();
  for (const auto& bad : kBadCaches) {
    CAPTURE(bad.what);
    Cache cache;
    cache.patch(bad.edit);
    check_refused(tandem + " data info " + cache.name, cache.name);
    // 1 GiB of address space: a verify that planned its chunks for the claimed 5 TiB would run out of it.
    check_refused(kBoundedMemory + tandem + " data verify " + cache.name, cache.name);
    const auto ls = test::run_command(tandem + " data ls");
    CHECK(ls.status == 0);
    CHECK(ls.output.find(cache.name) != std::string::npos);
    // The numpy reader written from docs/FORMAT.md applies the same validity rules.
    const auto py = test::run_command(test::python_with_numpy() + " " + test::source_root() + "/tools/tandem_shm.py " +
                                      cache.name);
    INFO(py.output);
    CHECK(py.status == 1);
    CHECK(py.output.find("tandem_shm.py: /dev/shm/tandem.data." + cache.name) == 0);
  }
}

TEST_CASE("dataset cache: the writer refuses sizes that wrap instead of making a short segment") {
  const std::string name = test::unique_name("hostile");
  shm::DatasetSpec spec{name, "test", "synthetic", 1ull << 61, {{"x", shm::DType::u8, {8}}}, {}};
  CHECK(error_of([&] { shm::DatasetWriter::create(spec, false); }).find("does not fit in 64-bit") != std::string::npos);
  spec.num_samples = 4;
  spec.fields[0].sample_shape = {1ull << 32, 1ull << 32};
  CHECK(error_of([&] { shm::DatasetWriter::create(spec, false); }).find("does not fit in 64-bit") != std::string::npos);
  CHECK_FALSE(Segment::exists(shm::dataset_segment_name(name)));
}

// ---- weight slab ---------------------------------------------------------------------------------

namespace {

shm::SlabSpec slab_spec() {
  shm::SlabSpec spec;
  spec.model = "hostile";
  spec.tensors = {{"w", shm::DType::f32, {1024}, 0, 4096}};
  spec.slot_bytes = 4096;
  spec.num_leases = 8;
  return spec;
}

void patch_slab(const std::string& name, const std::function<void(Segment&, shm::SlabDescriptor&)>& edit) {
  patch_segment(name, shm::Kind::weights, shm::kWeightSlabLayoutVersion,
                [&](Segment& s) { edit(s, s.descriptor_as<shm::SlabDescriptor>()); });
}

struct BadSlab {
  const char* what;
  std::function<void(Segment&, shm::SlabDescriptor&)> edit;
};

const BadSlab kBadSlabs[] = {
    {"lease_bytes 0", [](Segment&, shm::SlabDescriptor& d) { d.lease_bytes = 0; }},
    {"control_offset past the end", [](Segment&, shm::SlabDescriptor& d) { d.control_offset = 1ull << 62; }},
    {"control_offset misaligned", [](Segment&, shm::SlabDescriptor& d) { d.control_offset += 8; }},
    {"control_offset in the header", [](Segment&, shm::SlabDescriptor& d) { d.control_offset = 0; }},
    {"num_slots past the slot headers", [](Segment&, shm::SlabDescriptor& d) { d.num_slots = 200; }},
    {"num_leases past the lease pages", [](Segment&, shm::SlabDescriptor& d) { d.num_leases = 4096; }},
    {"slot stride that wraps", [](Segment&, shm::SlabDescriptor& d) { d.slot_stride = 1ull << 63; }},
    {"num_tensors past the segment", [](Segment&, shm::SlabDescriptor& d) { d.num_tensors = 1u << 31; }},
    {"tensor table edited",
     [](Segment& s,
        shm::SlabDescriptor& d) { reinterpret_cast<shm::TensorEntry*>(s.base() + d.table_offset)->bytes = ~0ull; }},
};

}  // namespace

TEST_CASE("weight slab: a descriptor whose offsets, sizes or counts lie is refused at attach") {
  for (const auto& bad : kBadSlabs) {
    CAPTURE(bad.what);
    const std::string name = shm::job_segment_name(test::unique_name("hostile"), shm::Kind::weights);
    auto writer = shm::WeightSlabWriter::create(name, slab_spec());
    patch_slab(name, bad.edit);
    const std::string error = error_of([&] { shm::WeightSlabReader::attach(name); });
    CHECK(error.find("weight slab '/" + name + "' has an invalid descriptor") != std::string::npos);
    CHECK(error.find("tandem shm rm " + name) != std::string::npos);
  }
}

TEST_CASE(
    "weight slab: a `latest` naming a slot past num_slots, or a slot claiming too many bytes, is a refused read") {
  const std::string name = shm::job_segment_name(test::unique_name("hostile"), shm::Kind::weights);
  auto writer = shm::WeightSlabWriter::create(name, slab_spec());
  auto slot = writer.begin_write();
  REQUIRE(slot);
  writer.commit(*slot, 1, 1, 4096, 0);
  auto reader = shm::WeightSlabReader::attach(name);
  REQUIRE(reader.lease_latest());

  Segment raw = Segment::attach(name, shm::Kind::weights, shm::kWeightSlabLayoutVersion, Segment::Access::read_write,
                                "");
  const auto& d = raw.descriptor_as<shm::SlabDescriptor>();
  auto& control = *reinterpret_cast<shm::SlabControl*>(raw.base() + d.control_offset);
  auto* headers = reinterpret_cast<shm::SlotHeader*>(raw.base() + d.control_offset + sizeof(shm::SlabControl));

  control.latest.store(shm::pack_latest(2, 200), std::memory_order_release);
  std::vector<std::byte> dst(4096);
  CHECK(error_of([&] { static_cast<void>(reader.lease_latest()); }).find("`latest` names slot 200 of 4") !=
        std::string::npos);
  CHECK(error_of([&] { static_cast<void>(reader.copy_latest(dst.data())); }).find("slot 200") != std::string::npos);

  control.latest.store(shm::pack_latest(1, slot->index), std::memory_order_release);
  headers[slot->index].bytes.store(1ull << 40, std::memory_order_relaxed);
  CHECK(error_of([&] { static_cast<void>(reader.lease_latest()); }).find("claims 1099511627776 bytes of 4096") !=
        std::string::npos);
  CHECK_FALSE(reader.copy_latest(dst.data()));
  // The refused lease was given back: a repaired slot leases again from the same entries.
  headers[slot->index].bytes.store(4096, std::memory_order_relaxed);
  CHECK(reader.lease_latest());
}

// ---- control block -------------------------------------------------------------------------------

TEST_CASE("control block: counts that wrap, rows out of place or unterminated names are refused at attach") {
  const std::function<void(shm::ControlDescriptor&, Segment&)> edits[] = {
      [](shm::ControlDescriptor& d, Segment&) { d.learner_count = 0xffffffffu, d.actor_count = 3, d.row_count = 2; },
      [](shm::ControlDescriptor& d, Segment&) { d.row_count = 100000; },
      [](shm::ControlDescriptor& d, Segment&) { std::memset(d.job, 'x', sizeof d.job); },
      [](shm::ControlDescriptor& d, Segment& s) {
    reinterpret_cast<shm::ProcessRow*>(s.payload() + d.rows_offset)[1].role = shm::Role::learner;
      },
  };
  for (const auto& edit : edits) {
    const std::string job = test::unique_name("hostile");
    auto block = shm::ControlBlock::create({.job = job, .learners = 1, .actors = 1, .run_dir = "/tmp/run"});
    patch_segment(shm::job_segment_name(job, shm::Kind::control), shm::Kind::control, shm::kControlLayoutVersion,
                  [&](Segment& s) { edit(s.descriptor_as<shm::ControlDescriptor>(), s); });
    const std::string error = error_of([&] { shm::ControlBlock::attach(job, Segment::Access::read_only); });
    CHECK(error.find("control block '/" + shm::job_segment_name(job, shm::Kind::control) + "'") != std::string::npos);
  }
}

// ---- the shared header and the docs --------------------------------------------------------------

TEST_CASE("segment: a payload offset inside the header page is refused, even when re-signed") {
  const std::string name = test::unique_name("tandem.hostile");
  Segment created = Segment::create(name, shm::Kind::dataset, 9, 4096, "");
  created.mark_ready();
  for (std::uint64_t offset : {std::uint64_t{0}, std::uint64_t{4} << 20}) {
    created.header().payload_offset = offset;
    created.header().header_checksum = shm::header_checksum(created.base());
    const std::string error = error_of(
        [&] { Segment::attach(name, shm::Kind::dataset, 9, Segment::Access::read_only, "fix"); });
    CHECK(error.find("payload offset " + std::to_string(offset)) != std::string::npos);
  }
}

TEST_CASE("TANDEM_SHM_LIMIT is documented in `tandem shm --help` and `tandem data preload --help`") {
  for (const std::string command : {" shm --help", " data preload --help"}) {
    const auto r = test::run_command(test::tandem_binary() + command);
    CHECK(r.status == 0);
    CHECK(r.output.find("TANDEM_SHM_LIMIT=SIZE") != std::string::npos);
  }
}
