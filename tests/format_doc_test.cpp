// docs/FORMAT.md is the contract other languages read: its tables must match the C++ structs
// (offsetof/sizeof), its code tables the enums, and tools/tandem_shm.py (numpy only, written from
// the document) must read exactly the bytes C++ wrote.
// The member tables below are laid out by hand, row by row like the document's tables (clang-format off).
#include <doctest/doctest.h>

#include <fmt/format.h>

#include <cstddef>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

#include "shm/control_block_format.hpp"
#include "shm/dataset_cache.hpp"
#include "shm/dtype.hpp"
#include "shm/experience_ring_format.hpp"
#include "shm/metric_fields.hpp"
#include "shm/node_group.hpp"
#include "shm/weight_slab.hpp"
#include "tests/case_check.hpp"
#include "tests/harness.hpp"

using namespace tandem;
using shm::DatasetDescriptor;
using shm::FieldDesc;
using shm::SegmentHeader;
using shm::SplitDesc;

namespace {

// One markdown table: the heading it sits under, its column names, and its rows.
struct Table {
  std::string heading;
  std::vector<std::string> columns;
  std::vector<std::vector<std::string>> rows;
};

std::vector<std::string> cells(const std::string& line) {
  std::vector<std::string> out;
  std::stringstream ss(line.substr(1));
  for (std::string cell; std::getline(ss, cell, '|');) {
    cell.erase(0, cell.find_first_not_of(' '));
    cell.erase(cell.find_last_not_of(' ') + 1);
    out.push_back(cell);
  }
  return out;
}

std::string read_doc() {
  std::ifstream in(test::source_root() + "/docs/FORMAT.md");
  REQUIRE_MESSAGE(in.good(), "docs/FORMAT.md not found under TANDEM_SOURCE_ROOT");
  return {std::istreambuf_iterator<char>(in), {}};
}

std::vector<Table> parse_tables(const std::string& doc) {
  std::vector<Table> tables;
  std::string heading, line;
  bool in_table = false;
  std::stringstream ss(doc);
  while (std::getline(ss, line)) {
    if (line.starts_with("#")) heading = line;
    if (!line.starts_with("|")) {
      in_table = false;
      continue;
    }
    if (!in_table) {
      tables.push_back({heading, cells(line), {}});
      in_table = true;
    } else if (line.find("---") == std::string::npos) {
      tables.back().rows.push_back(cells(line));
    }
  }
  return tables;
}

const Table& table_under(const std::vector<Table>& tables, const std::string& heading_part,
                         const std::string& first_column) {
  for (const auto& t : tables)
    if (t.heading.find(heading_part) != std::string::npos && !t.columns.empty() && t.columns[0] == first_column)
      return t;
  FAIL("docs/FORMAT.md has no table starting with '" << first_column << "' under a heading containing "
                                                     << heading_part);
  throw std::logic_error("unreachable");
}

struct Member {
  std::string name;
  std::size_t offset, size;
};
// clang-format off
#define MEMBER(S, m) Member{#m, offsetof(S, m), sizeof(S::m)}
// clang-format on

// Bytes of a type as the document spells it: u32, i64, char[16], u64[4], FieldDesc[8], ...
std::size_t doc_type_size(const std::string& type) {
  // clang-format off
  static const std::map<std::string, std::size_t> base = {
      {"u8", 1}, {"u16", 2}, {"u32", 4}, {"u64", 8}, {"i8", 1}, {"i16", 2}, {"i32", 4}, {"i64", 8}, {"char", 1},
      {"FieldDesc", sizeof(FieldDesc)}, {"SplitDesc", sizeof(SplitDesc)},
      {"f64", 8}, {"f32", 4}};
  // clang-format on
  std::size_t bracket = type.find('[');
  std::size_t count = bracket == std::string::npos ? 1 : std::stoul(type.substr(bracket + 1));
  auto it = base.find(type.substr(0, bracket));
  return it == base.end() ? 0 : it->second * count;
}

void check_struct(const std::vector<Table>& tables, const std::string& name, std::size_t size,
                  const std::vector<Member>& members) {
  CAPTURE(name);
  const Table& t = table_under(tables, "### `" + name + "`", "offset");
  CHECK(t.heading.find(fmt::format("({} bytes", size)) != std::string::npos);
  REQUIRE(t.rows.size() == members.size());
  std::size_t end = 0;
  for (std::size_t i = 0; i < members.size(); ++i) {
    const auto& row = t.rows[i];
    CAPTURE(row[3]);
    CHECK(row[3] == members[i].name);
    CHECK(std::stoul(row[0]) == members[i].offset);
    CHECK(std::stoul(row[1]) == members[i].size);
    CHECK(std::stoul(row[0]) == end);  // no hidden padding
    CHECK(doc_type_size(row[2]) == members[i].size);
    end = std::stoul(row[0]) + std::stoul(row[1]);
  }
  CHECK(end == size);
}

std::string hex(const std::byte* p, std::size_t n) {
  std::string out;
  for (std::size_t i = 0; i < n; ++i) out += fmt::format("{:02x}", static_cast<unsigned>(p[i]));
  return out;
}

}  // namespace

TEST_CASE("FORMAT.md: the segment header and dataset cache tables match the structs' offsets and sizes") {
  const auto tables = parse_tables(read_doc());
  check_struct(tables, "SegmentHeader", sizeof(SegmentHeader),
               {MEMBER(SegmentHeader, magic), MEMBER(SegmentHeader, kind), MEMBER(SegmentHeader, layout_version),
                MEMBER(SegmentHeader, creator_uid), MEMBER(SegmentHeader, creator_pid),
                MEMBER(SegmentHeader, created_unix_ns), MEMBER(SegmentHeader, total_size),
                MEMBER(SegmentHeader, payload_offset), MEMBER(SegmentHeader, header_checksum),
                MEMBER(SegmentHeader, ready), MEMBER(SegmentHeader, creator_start)});
  check_struct(tables, "DatasetDescriptor", sizeof(DatasetDescriptor),
               {MEMBER(DatasetDescriptor, name), MEMBER(DatasetDescriptor, source), MEMBER(DatasetDescriptor, format),
                MEMBER(DatasetDescriptor, num_samples), MEMBER(DatasetDescriptor, num_fields),
                MEMBER(DatasetDescriptor, num_splits), MEMBER(DatasetDescriptor, payload_checksum),
                MEMBER(DatasetDescriptor, load_ns), MEMBER(DatasetDescriptor, fields),
                MEMBER(DatasetDescriptor, splits)});
  check_struct(tables, "FieldDesc", sizeof(FieldDesc),
               {MEMBER(FieldDesc, name), MEMBER(FieldDesc, dtype), MEMBER(FieldDesc, ndim), MEMBER(FieldDesc, shape),
                MEMBER(FieldDesc, offset), MEMBER(FieldDesc, stride), MEMBER(FieldDesc, bytes)});
  check_struct(tables, "SplitDesc", sizeof(SplitDesc),
               {MEMBER(SplitDesc, name), MEMBER(SplitDesc, begin), MEMBER(SplitDesc, end)});
}

TEST_CASE("FORMAT.md: the kind and dtype code tables and the constants match the C++ definitions") {
  const std::string doc = read_doc();
  const auto tables = parse_tables(doc);
  const Table& kinds = table_under(tables, "### `SegmentHeader`", "code");
  CHECK(kinds.rows.size() == 6);
  for (const auto& row : kinds.rows) CHECK(shm::kind_name(static_cast<shm::Kind>(std::stoul(row[0]))) == row[1]);

  const Table& dtypes = table_under(tables, "### `FieldDesc`", "code");
  CHECK(dtypes.rows.size() == 11);
  for (const auto& row : dtypes.rows) {
    auto dtype = static_cast<shm::DType>(std::stoul(row[0]));
    CHECK(shm::dtype_name(dtype) == row[1]);
    CHECK(shm::dtype_size(dtype) == std::stoul(row[2]));
  }
  CHECK(doc.find(fmt::format("`0x{:016x}`", shm::kMagic)) != std::string::npos);
  CHECK(doc.find(fmt::format("multiple of 2 MiB ({} bytes", shm::kPayloadAlignment)) != std::string::npos);
  CHECK(doc.find(fmt::format("chunks of 4 MiB ({} bytes", shm::kChecksumChunk)) != std::string::npos);
  CHECK(doc.find(fmt::format("`layout_version` = {}", shm::kDatasetLayoutVersion)) != std::string::npos);
  CHECK(doc.find(fmt::format("bytes [0, {}) followed by header bytes [{}, {})",
                             offsetof(SegmentHeader, header_checksum), shm::kDescriptorOffset, shm::kHeaderBytes)) !=
        std::string::npos);
}

TEST_CASE("tandem_shm.py reads with numpy exactly the bytes C++ wrote, and refuses an unready cache") {
  const char* python = std::getenv("TANDEM_PYTHON");
  REQUIRE_MESSAGE(python != nullptr, "TANDEM_PYTHON (a python3 with numpy) is set by meson");
  const std::string name = test::unique_name("pyread");
  const std::string script = fmt::format("{} {}/tools/tandem_shm.py {}", python, test::source_root(), name);

  shm::DatasetSpec spec{name,
                        "/synthetic",
                        "synthetic",
                        10,
                        {{"x", shm::DType::u8, {1, 4, 5}}, {"y", shm::DType::i64, {}}, {"z", shm::DType::f32, {3}}},
                        {{"train", 0, 7}, {"test", 7, 10}}};
  auto writer = shm::DatasetWriter::create(spec, false);
  const auto& d = writer.descriptor();
  for (std::uint32_t f = 0; f < d.num_fields; ++f)
    for (std::uint64_t b = 0; b < d.fields[f].bytes; ++b)
      writer.field_data(f)[b] = static_cast<std::byte>((b * 37 + f) & 0xff);

  test::CommandResult unready = test::run_command(script + " --json");
  CHECK(unready.status == 1);
  CHECK(unready.output.find("is not ready") != std::string::npos);

  writer.commit(123, 1);
  struct Cleanup {
    std::string seg;
    ~Cleanup() { shm::Segment::unlink(seg); }
  } cleanup{writer.segment_name()};

  test::CommandResult json = test::run_command(script + " --json");
  INFO(json.output);
  REQUIRE(json.status == 0);
  CHECK(json.output.find("\"num_samples\": 10") != std::string::npos);
  CHECK(json.output.find("\"splits\": {\"test\": [7, 10], \"train\": [0, 7]}") != std::string::npos);
  CHECK(json.output.find(fmt::format("\"payload_checksum\": \"{:016x}\"", d.payload_checksum)) != std::string::npos);
  CHECK(json.output.find("\"load_ns\": 123") != std::string::npos);
  for (std::uint32_t f = 0; f < d.num_fields; ++f) {
    const FieldDesc& fd = d.fields[f];
    CHECK(json.output.find(fmt::format("\"{}\": {{\"bytes\": {}, \"dtype\": \"{}\", \"offset\": {}", fd.name, fd.bytes,
                                       shm::dtype_name(fd.dtype), fd.offset)) != std::string::npos);
    for (std::uint64_t sample : {0ull, 3ull, 9ull}) {
      test::CommandResult sample_hex = test::run_command(fmt::format("{} --hex {} {}", script, fd.name, sample));
      CHECK(sample_hex.output == hex(writer.field_data(f) + sample * fd.stride, fd.stride) + "\n");
    }
  }

  // With the optional xxhash package, Python also recomputes both checksums from the document.
  if (test::run_command(fmt::format("{} -c 'import xxhash'", python)).status == 0) {
    CHECK(test::run_command(script + " --verify").status == 0);
    writer.field_data(1)[5] ^= std::byte{1};  // the writer's mapping is still read-write
    test::CommandResult bad = test::run_command(script + " --verify");
    CHECK(bad.status == 1);
    CHECK(bad.output.find("payload checksum mismatch") != std::string::npos);
  } else {
    test::skip_case("python3-xxhash is not installed: the Python checksum recomputation was not tested");
  }
}

TEST_CASE("FORMAT.md: the control block tables match the structs' offsets and sizes, and its code tables the enums") {
  using shm::ControlDescriptor;
  using shm::JobControl;
  using shm::ProcessMetrics;
  using shm::ProcessRow;
  const std::string doc = read_doc();
  const auto tables = parse_tables(doc);
  check_struct(tables, "ControlDescriptor", sizeof(ControlDescriptor),
               {MEMBER(ControlDescriptor, row_count), MEMBER(ControlDescriptor, learner_count),
                MEMBER(ControlDescriptor, actor_count), MEMBER(ControlDescriptor, row_bytes),
                MEMBER(ControlDescriptor, job_offset), MEMBER(ControlDescriptor, rows_offset),
                MEMBER(ControlDescriptor, launcher_pid), MEMBER(ControlDescriptor, reserved0),
                MEMBER(ControlDescriptor, started_unix_ns), MEMBER(ControlDescriptor, started_mono_ns),
                MEMBER(ControlDescriptor, job), MEMBER(ControlDescriptor, run_dir)});
  check_struct(tables, "JobControl", sizeof(JobControl),
               {MEMBER(JobControl, stop), MEMBER(JobControl, stop_reason), MEMBER(JobControl, stop_mono_ns),
                MEMBER(JobControl, launcher_heartbeat_ns), MEMBER(JobControl, nccl_id_state),
                MEMBER(JobControl, reserved0), MEMBER(JobControl, reserved1), MEMBER(JobControl, nccl_id),
                MEMBER(JobControl, reserved2)});
  check_struct(tables, "ProcessRow", sizeof(ProcessRow),
               {MEMBER(ProcessRow, role), MEMBER(ProcessRow, index), MEMBER(ProcessRow, pid), MEMBER(ProcessRow, state),
                MEMBER(ProcessRow, restarts), MEMBER(ProcessRow, exit_status), MEMBER(ProcessRow, spawned_ns),
                MEMBER(ProcessRow, heartbeat_ns), MEMBER(ProcessRow, version_seen), MEMBER(ProcessRow, group),
                MEMBER(ProcessRow, no_heartbeat), MEMBER(ProcessRow, metrics_seq), MEMBER(ProcessRow, metrics),
                MEMBER(ProcessRow, reserved)});
  std::vector<Member> metrics = {MEMBER(ProcessMetrics, updated_ns)};  // then the named fields
  for (const shm::MetricField& f : shm::kMetricFields) metrics.push_back({std::string(f.name), f.offset, 8});
  check_struct(tables, "ProcessMetrics", sizeof(ProcessMetrics), metrics);

  const Table& states = table_under(tables, "### `ProcessRow`", "code");
  CHECK(states.rows.size() == 7);
  for (const auto& row : states.rows)
    CHECK(shm::state_name(static_cast<shm::ProcessState>(std::stoul(row[0]))) == row[1]);
  const Table& reasons = table_under(tables, "### `JobControl`", "code");
  CHECK(reasons.rows.size() == 4);
  for (const auto& row : reasons.rows)
    CHECK(shm::stop_reason_name(static_cast<shm::StopReason>(std::stoul(row[0]))) == row[1]);
  CHECK(doc.find(fmt::format("`kind` = {} (ctl), `layout_version` = {}", static_cast<int>(shm::Kind::control),
                             shm::kControlLayoutVersion)) != std::string::npos);
  CHECK(doc.find(fmt::format("| 1 = learner, 2 = actor |")) != std::string::npos);
  CHECK(static_cast<int>(shm::Role::learner) == 1);
  CHECK(static_cast<int>(shm::Role::actor) == 2);
}

TEST_CASE("FORMAT.md: the weight slab tables match the structs' offsets and sizes") {
  using namespace tandem::shm;
  const auto tables = parse_tables(read_doc());
  check_struct(tables, "SlabDescriptor", sizeof(SlabDescriptor),
               {MEMBER(SlabDescriptor, model), MEMBER(SlabDescriptor, model_signature),
                MEMBER(SlabDescriptor, table_checksum), MEMBER(SlabDescriptor, publish_dtype),
                MEMBER(SlabDescriptor, num_slots), MEMBER(SlabDescriptor, num_leases),
                MEMBER(SlabDescriptor, num_tensors), MEMBER(SlabDescriptor, slot_bytes),
                MEMBER(SlabDescriptor, slot_stride), MEMBER(SlabDescriptor, control_offset),
                MEMBER(SlabDescriptor, lease_offset), MEMBER(SlabDescriptor, lease_bytes),
                MEMBER(SlabDescriptor, table_offset), MEMBER(SlabDescriptor, slots_offset)});
  check_struct(tables, "SlabControl", sizeof(SlabControl),
               {MEMBER(SlabControl, latest), MEMBER(SlabControl, published), MEMBER(SlabControl, skipped),
                MEMBER(SlabControl, reclaimed), MEMBER(SlabControl, writer_pid), MEMBER(SlabControl, reserved)});
  check_struct(tables, "SlotHeader", sizeof(SlotHeader),
               {MEMBER(SlotHeader, seq), MEMBER(SlotHeader, version), MEMBER(SlotHeader, step),
                MEMBER(SlotHeader, bytes), MEMBER(SlotHeader, snapshot_ns), MEMBER(SlotHeader, publish_ns),
                MEMBER(SlotHeader, reserved)});
  check_struct(tables, "LeaseEntry", sizeof(LeaseEntry),
               {MEMBER(LeaseEntry, owner), MEMBER(LeaseEntry, lease), MEMBER(LeaseEntry, version),
                MEMBER(LeaseEntry, reserved)});
  check_struct(tables, "TensorEntry", sizeof(TensorEntry),
               {MEMBER(TensorEntry, name), MEMBER(TensorEntry, dtype), MEMBER(TensorEntry, ndim),
                MEMBER(TensorEntry, shape), MEMBER(TensorEntry, offset), MEMBER(TensorEntry, bytes)});
  check_struct(tables, "DeviceSlabInfo", sizeof(DeviceSlabInfo),
               {MEMBER(DeviceSlabInfo, ipc_handle), MEMBER(DeviceSlabInfo, gpu_uuid),
                MEMBER(DeviceSlabInfo, pci_bus_id), MEMBER(DeviceSlabInfo, buffer_bytes),
                MEMBER(DeviceSlabInfo, exporter_pid)});
  const std::string doc = read_doc();
  CHECK(doc.find(fmt::format("(128 bytes, at byte 64 + {} = {})", kDeviceInfoOffset,
                             kDescriptorOffset + kDeviceInfoOffset)) != std::string::npos);
  CHECK(doc.find(fmt::format("| {} | weights.cuda |", static_cast<int>(Kind::weights_cuda))) != std::string::npos);
}

TEST_CASE("FORMAT.md: the node reduce group tables match the structs") {
  using namespace tandem::shm;
  const auto tables = parse_tables(read_doc());
  check_struct(tables, "ReduceDescriptor", sizeof(ReduceDescriptor),
               {MEMBER(ReduceDescriptor, world), MEMBER(ReduceDescriptor, reserved),
                MEMBER(ReduceDescriptor, chunk_bytes), MEMBER(ReduceDescriptor, data_offset),
                MEMBER(ReduceDescriptor, slot_bytes)});
  check_struct(tables, "ReduceControl", sizeof(ReduceControl),
               {MEMBER(ReduceControl, bell), MEMBER(ReduceControl, aborted_by), MEMBER(ReduceControl, pieces_claimed),
                MEMBER(ReduceControl, pieces_summed), MEMBER(ReduceControl, reserved)});
  check_struct(tables, "RankLane", sizeof(RankLane),
               {MEMBER(RankLane, arrived), MEMBER(RankLane, pid), MEMBER(RankLane, reserved0),
                MEMBER(RankLane, start_ticks), MEMBER(RankLane, slots_started), MEMBER(RankLane, reserved)});
  CHECK(read_doc().find(fmt::format("| {} | reduce |", static_cast<int>(Kind::reduce))) != std::string::npos);
}

TEST_CASE("FORMAT.md: the experience ring tables match the structs, and the slot example matches the layout") {
  using namespace tandem::shm;
  const std::string doc = read_doc();
  const auto tables = parse_tables(doc);
  // clang-format off
  check_struct(tables, "ExperienceDescriptor", sizeof(ExperienceDescriptor),
               {MEMBER(ExperienceDescriptor, num_actors), MEMBER(ExperienceDescriptor, slots_per_ring),
                MEMBER(ExperienceDescriptor, steps), MEMBER(ExperienceDescriptor, envs),
                MEMBER(ExperienceDescriptor, obs_dim), MEMBER(ExperienceDescriptor, action_kind),
                MEMBER(ExperienceDescriptor, action_dim), MEMBER(ExperienceDescriptor, logits_dim),
                MEMBER(ExperienceDescriptor, max_episodes), MEMBER(ExperienceDescriptor, ring_bytes),
                MEMBER(ExperienceDescriptor, slot_bytes), MEMBER(ExperienceDescriptor, slot_stride),
                MEMBER(ExperienceDescriptor, rings_offset), MEMBER(ExperienceDescriptor, slots_offset),
                MEMBER(ExperienceDescriptor, observations_offset), MEMBER(ExperienceDescriptor, actions_offset),
                MEMBER(ExperienceDescriptor, rewards_offset), MEMBER(ExperienceDescriptor, terminated_offset),
                MEMBER(ExperienceDescriptor, truncated_offset), MEMBER(ExperienceDescriptor, log_probs_offset),
                MEMBER(ExperienceDescriptor, logits_offset), MEMBER(ExperienceDescriptor, values_offset),
                MEMBER(ExperienceDescriptor, episode_returns_offset),
                MEMBER(ExperienceDescriptor, episode_lengths_offset),
                MEMBER(ExperienceDescriptor, final_observations_offset), MEMBER(ExperienceDescriptor, reserved)});
  // clang-format on
  check_struct(tables, "RingControl", sizeof(RingControl),
               {MEMBER(RingControl, head), MEMBER(RingControl, full_waits), MEMBER(RingControl, writer_pid),
                MEMBER(RingControl, writer_attaches), MEMBER(RingControl, reserved0), MEMBER(RingControl, tail),
                MEMBER(RingControl, refused), MEMBER(RingControl, reserved1), MEMBER(RingControl, reserved2)});
  check_struct(tables, "TrajectoryHeader", sizeof(TrajectoryHeader),
               {MEMBER(TrajectoryHeader, checksum), MEMBER(TrajectoryHeader, seq),
                MEMBER(TrajectoryHeader, policy_version), MEMBER(TrajectoryHeader, episodes),
                MEMBER(TrajectoryHeader, writer_start), MEMBER(TrajectoryHeader, reserved)});

  // The documented example, laid out by the code: every field in the documented order and place.
  ExperienceDescriptor d{};
  d.num_actors = 1, d.slots_per_ring = 1, d.steps = 5, d.envs = 3, d.obs_dim = 4;
  d.action_kind = static_cast<std::uint32_t>(ActionKind::discrete), d.action_dim = 1, d.logits_dim = 2;
  REQUIRE(layout_experience(d, kPayloadAlignment) == "");
  // clang-format off
  const std::map<std::string, std::uint64_t> offsets = {
      {"observations", d.observations_offset}, {"actions", d.actions_offset}, {"rewards", d.rewards_offset},
      {"terminated", d.terminated_offset}, {"truncated", d.truncated_offset}, {"log_probs", d.log_probs_offset},
      {"logits", d.logits_offset}, {"values", d.values_offset}, {"episode_returns", d.episode_returns_offset},
      {"episode_lengths", d.episode_lengths_offset}, {"final_observations", d.final_observations_offset}};
  // clang-format on
  const Table& fields = table_under(tables, "### Slot fields", "field");
  REQUIRE(fields.rows.size() == offsets.size());
  std::uint64_t previous = 0;
  for (const auto& row : fields.rows) {
    CAPTURE(row[0]);
    REQUIRE(offsets.count(row[0]) == 1);
    CHECK(offsets.at(row[0]) == std::stoull(row[1]));
    CHECK(std::stoull(row[1]) > previous);  // the table lists the fields in slot order
    previous = std::stoull(row[1]);
  }
  CHECK(doc.find(fmt::format("In the example `slot_bytes` = {} and `slot_stride` = {}.", d.slot_bytes,
                             d.slot_stride)) != std::string::npos);
  CHECK(doc.find(fmt::format("`kind` = {} (exp), `layout_version` = {}", static_cast<int>(Kind::experience),
                             kExperienceLayoutVersion)) != std::string::npos);
  CHECK(doc.find(fmt::format("bytes per `RingControl`: {}", sizeof(RingControl))) != std::string::npos);
}
