// The weight slab's layout: checking a writer's spec, placing the regions, creating the segment, and
// attaching a reader (checks, page protection, lease entries). Writing: weight_slab_writer.cpp;
// reading: weight_slab_reader.cpp; leases: weight_slab_leases.cpp.
#include "shm/weight_slab.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <fmt/format.h>
#include <xxhash.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <optional>
#include <stdexcept>

#include "common/checked_math.hpp"
#include "common/error.hpp"
#include "common/quote.hpp"
#include "common/process.hpp"
#include "shm/weight_slab_layout.hpp"

namespace tandem::shm {
namespace {

// The slab stores names NUL-terminated and readers print them: a NUL would cut one, a control
// character would break a one-line message.
bool has_control_byte(std::string_view text) {
  return std::any_of(text.begin(), text.end(),
                     [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; });
}

void check_spec(const std::string& name, const SlabSpec& spec) {
  if (spec.num_slots < 2 || spec.num_slots > kMaxSlots)
    fail(
        "weight slab '/{}': {} slots asked for, use 2..{} (the latest slot is never rewritten, so 1 cannot publish twice)",
        name, spec.num_slots, kMaxSlots);
  if (spec.num_leases < 1 || spec.num_leases > kMaxLeases)
    fail("weight slab '/{}': {} lease entries asked for, use 1..{}", name, spec.num_leases, kMaxLeases);
  if (spec.slot_bytes == 0) fail("weight slab '/{}': the model has no bytes to publish", name);
  if (spec.model.size() >= sizeof(SlabDescriptor::model) || has_control_byte(spec.model))
    fail("weight slab '/{}': model name {} must be at most {} printable characters: shorten it", name,
         quote_escaped(spec.model), sizeof(SlabDescriptor::model) - 1);
  for (const TensorSpec& t : spec.tensors) {
    if (t.name.empty() || t.name.size() >= kTensorNameBytes || has_control_byte(t.name))
      fail("weight slab '/{}': tensor name {} must be 1..{} printable characters", name, quote_escaped(t.name),
           kTensorNameBytes - 1);
    if (t.shape.size() > kTensorMaxDims)
      fail("weight slab '/{}': tensor '{}' has {} dimensions, the slab holds at most {}", name, t.name, t.shape.size(),
           kTensorMaxDims);
    const auto end = checked_add(t.offset, t.bytes);
    if (dtype_size(t.dtype) == 0 || !end || *end > spec.slot_bytes || t.offset % dtype_size(t.dtype) != 0)
      fail("weight slab '/{}': tensor '{}' at [{}, +{}) does not fit an aligned place in a {}-byte slot", name, t.name,
           t.offset, t.bytes, spec.slot_bytes);
  }
}

// Every region's place; the control block starts where the segment's payload does (2 MiB). A device
// slab's slots are not in the segment: slots_offset 0, the segment ends after the tensor table.
SlabDescriptor place_regions(const SlabSpec& spec, bool device) {
  SlabDescriptor d{};
  std::snprintf(d.model, sizeof d.model, "%s", spec.model.c_str());
  d.model_signature = spec.model_signature;
  d.publish_dtype = spec.publish_dtype;
  d.num_slots = spec.num_slots;
  d.num_leases = spec.num_leases;
  d.num_tensors = static_cast<std::uint32_t>(spec.tensors.size());
  d.slot_bytes = spec.slot_bytes;
  d.slot_stride = align_up(spec.slot_bytes, kSlotAlignment);
  d.control_offset = kPayloadAlignment;
  d.lease_offset = d.control_offset + slab::kControlBytes;
  d.lease_bytes = align_up(std::uint64_t{spec.num_leases} * sizeof(LeaseEntry), 4096);
  d.table_offset = d.lease_offset + d.lease_bytes;
  d.slots_offset = device ? 0 : align_up(d.table_offset + spec.tensors.size() * sizeof(TensorEntry), kSlotAlignment);
  return d;
}
std::uint64_t segment_bytes(const SlabDescriptor& d) {
  if (d.slots_offset != 0) return d.slots_offset + d.num_slots * d.slot_stride;
  return align_up(d.table_offset + d.num_tensors * sizeof(TensorEntry), 4096);
}

void write_tensor_table(TensorEntry* table, const std::vector<TensorSpec>& tensors) {
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const TensorSpec& t = tensors[i];
    TensorEntry e{};
    std::memcpy(e.name, t.name.data(), t.name.size());
    e.dtype = t.dtype;
    e.ndim = static_cast<std::uint32_t>(t.shape.size());
    std::copy(t.shape.begin(), t.shape.end(), e.shape);
    e.offset = t.offset;
    e.bytes = t.bytes;
    table[i] = e;
  }
}

// Whether [offset, offset + bytes) lies inside the segment's payload (after the header page).
bool region_fits(std::uint64_t offset, std::optional<std::uint64_t> bytes, std::uint64_t size) {
  const auto end = bytes ? checked_add(offset, *bytes) : std::nullopt;
  return offset >= kHeaderBytes && end && *end <= size;
}
bool disjoint(std::uint64_t a, std::uint64_t a_bytes, std::uint64_t b, std::uint64_t b_bytes) {
  return a + a_bytes <= b || b + b_bytes <= a;  // both already known to fit, so no wrap
}

// Every count, offset and size a reader indexes with, checked (with checked arithmetic) against the
// real mapping: the descriptor lies in memory any process of this uid may have written.
std::string descriptor_problem(const SlabDescriptor& d, const Segment& seg) {
  const std::uint64_t size = seg.size();
  if (d.num_slots < 2 || d.num_slots > kMaxSlots) return fmt::format("{} slots (2..{})", d.num_slots, kMaxSlots);
  if (d.num_leases < 1 || d.num_leases > kMaxLeases)
    return fmt::format("{} lease entries (1..{})", d.num_leases, kMaxLeases);
  if (dtype_size(d.publish_dtype) == 0) return "an unknown publish dtype";
  if (d.control_offset % 4096 != 0 || !region_fits(d.control_offset, slab::kControlBytes, size))
    return fmt::format("control offset {} outside the segment or not page aligned", d.control_offset);
  const auto lease_need = checked_mul(d.num_leases, sizeof(LeaseEntry));
  if (d.lease_offset % 4096 != 0 || d.lease_bytes % 4096 != 0 || d.lease_bytes < *lease_need ||
      !region_fits(d.lease_offset, d.lease_bytes, size))
    return fmt::format("lease table [{}, +{}) does not hold {} page-aligned entries inside the segment", d.lease_offset,
                       d.lease_bytes, d.num_leases);
  if (!disjoint(d.control_offset, slab::kControlBytes, d.lease_offset, d.lease_bytes))
    return "its lease table overlaps its control block";
  const auto table_bytes = checked_mul(d.num_tensors, sizeof(TensorEntry));
  if (d.table_offset % alignof(TensorEntry) != 0 || !region_fits(d.table_offset, table_bytes, size))
    return fmt::format("tensor table of {} entries at {} lies outside the segment", d.num_tensors, d.table_offset);
  if (d.slot_bytes == 0 || d.slot_bytes > d.slot_stride || d.slot_stride % kSlotAlignment != 0)
    return fmt::format("slots of {} bytes with stride {} (a multiple of 2 MiB >= the slot)", d.slot_bytes,
                       d.slot_stride);
  if (seg.header().kind == Kind::weights_cuda) {
    const DeviceSlabInfo& info = slab::device_info_of(seg);
    if (d.slots_offset != 0) return "a device slab with slots inside the segment";
    const auto span = checked_mul(d.num_slots, d.slot_stride);
    if (!span || *span > info.buffer_bytes)
      return fmt::format("{} slots of stride {} do not fit its {}-byte device buffer", d.num_slots, d.slot_stride,
                         info.buffer_bytes);
    if (info.exporter_pid == 0 || info.pci_bus_id[sizeof info.pci_bus_id - 1] != '\0') return "an unnamed exporter";
  } else {
    if (d.slots_offset % kSlotAlignment != 0 ||
        !region_fits(d.slots_offset, checked_mul(d.num_slots, d.slot_stride), size))
      return fmt::format("{} slots of {} bytes (stride {}) at {} do not fit the {}-byte segment", d.num_slots,
                         d.slot_bytes, d.slot_stride, d.slots_offset, size);
    if (!disjoint(d.lease_offset, d.lease_bytes, d.slots_offset, d.num_slots * d.slot_stride))
      return "its lease table overlaps its slots";
  }
  const auto* table = reinterpret_cast<const TensorEntry*>(seg.base() + d.table_offset);
  if (XXH3_64bits(table, *table_bytes) != d.table_checksum) return "its tensor table does not match its checksum";
  for (std::uint32_t i = 0; i < d.num_tensors; ++i) {
    const TensorEntry& t = table[i];
    const auto end = checked_add(t.offset, t.bytes);
    if (dtype_size(t.dtype) == 0 || t.ndim > kTensorMaxDims || !end || *end > d.slot_bytes ||
        t.offset % dtype_size(t.dtype) != 0)
      return fmt::format("tensor {} does not fit an aligned place in a {}-byte slot", i, d.slot_bytes);
  }
  return "";
}

void check_descriptor(const std::string& name, const SlabDescriptor& d, const Segment& seg) {
  if (std::string problem = descriptor_problem(d, seg); !problem.empty())
    fail(ErrorKind::corrupt_segment,
         "weight slab '/{}' has an invalid descriptor ({}): remove it (`tandem shm rm {}`) and restart the learner",
         name, problem, name);
}

}  // namespace

WeightSlabWriter WeightSlabWriter::create(const std::string& name, const SlabSpec& spec, bool force) {
  return create_segment(name, spec, force, nullptr, nullptr);
}

WeightSlabWriter WeightSlabWriter::create_on_device(const std::string& name, const SlabSpec& spec, DeviceSlabInfo info,
                                                    std::byte* device_slots) {
  if (device_slots == nullptr || info.buffer_bytes < device_slab_bytes(spec))
    throw std::logic_error("weight slab: device slots missing or smaller than device_slab_bytes()");
  info.pci_bus_id[sizeof info.pci_bus_id - 1] = '\0';
  return create_segment(name, spec, false, &info, device_slots);
}

std::uint64_t WeightSlabWriter::device_slab_bytes(const SlabSpec& spec) {
  return std::uint64_t{spec.num_slots} * align_up(spec.slot_bytes, kSlotAlignment);
}

WeightSlabWriter WeightSlabWriter::create_segment(const std::string& name, const SlabSpec& spec, bool force,
                                                  const DeviceSlabInfo* device, std::byte* device_slots) {
  check_spec(name, spec);
  if (force && Segment::remove(name).result == Segment::Removal::denied)
    fail(ErrorKind::segment_exists, "weight slab '/{}' cannot be replaced ({}): choose another job name", name,
         Segment::foreign_owner(name).empty() ? "permission denied" : Segment::foreign_owner(name));

  SlabDescriptor d = place_regions(spec, device != nullptr);
  WeightSlabWriter w;
  w.segment_ = Segment::create(name, device ? Kind::weights_cuda : Kind::weights, kWeightSlabLayoutVersion,
                               segment_bytes(d) - kPayloadAlignment,
                               "another learner is publishing under this job name: stop it, choose another "
                               "job name, or remove the stale segment with `tandem shm gc`");
  if (w.segment_.header().payload_offset != d.control_offset)
    throw std::logic_error("weight slab: segment payload offset is not 2 MiB");

  auto* table = reinterpret_cast<TensorEntry*>(w.segment_.base() + d.table_offset);
  write_tensor_table(table, spec.tensors);
  d.table_checksum = XXH3_64bits(table, spec.tensors.size() * sizeof(TensorEntry));
  w.segment_.descriptor_as<SlabDescriptor>() = d;
  if (device) slab::device_info_of(w.segment_) = *device;
  w.slots_ = device ? device_slots : w.segment_.base() + d.slots_offset;
  // Every slot is written by the first publishes that reach it: fault them in here, at creation,
  // rather than in the middle of training (docs/BENCHMARKS.md, "Weight publish").
  if (!device) w.segment_.prefault_for_write(d.slots_offset, std::size_t{d.num_slots} * d.slot_stride);
  // ftruncate zero-filled the control block, slot headers and lease table: latest = 0, seq = 0.
  slab::control_of(w.segment_, d).writer_pid.store(static_cast<std::uint64_t>(::getpid()), std::memory_order_relaxed);
  w.segment_.mark_ready();
  w.live_ = LiveWriterMark(name);
  return w;
}

WeightSlabReader WeightSlabReader::attach(const std::string& name, std::uint32_t leases) {
  return attach_kind(name, leases, false);
}
WeightSlabReader WeightSlabReader::attach_device(const std::string& name, std::uint32_t leases) {
  return attach_kind(name, leases, true);
}

WeightSlabReader WeightSlabReader::attach_kind(const std::string& name, std::uint32_t leases, bool device) {
  WeightSlabReader r;
  r.segment_ = Segment::attach(
      name, device ? Kind::weights_cuda : Kind::weights, kWeightSlabLayoutVersion, Segment::Access::read_write,
      fmt::format("start the learner that publishes '/{}' first, or check the job name", name));
  r.device_ = device;
  const SlabDescriptor& d = r.descriptor();
  const std::uint64_t size = r.segment_.size();
  check_descriptor(name, d, r.segment_);
  if (device) {
    const DeviceSlabInfo& info = slab::device_info_of(r.segment_);
    if (!process_alive(static_cast<std::uint32_t>(info.exporter_pid)))
      fail(
          "device weight slab '/{}' was exported by process {}, which has exited (its GPU memory is gone): remove "
          "it (`tandem shm rm {}`) and restart the learner",
          name, info.exporter_pid, name);
  } else {
    r.slots_ = r.segment_.base() + d.slots_offset;
    // The slots' pages into this mapping now, at attach, not one fault per page in each slot's first
    // copy (25 600 for 100 MB) while following the writer. Kernels before 5.14 fault them lazily.
#ifdef MADV_POPULATE_READ
    (void)::madvise(r.segment_.base() + d.slots_offset, std::size_t{d.num_slots} * d.slot_stride, MADV_POPULATE_READ);
#endif
  }

  // Everything but the lease pages becomes read-only for this process (see the contract).
  std::byte* base = r.segment_.base();
  TANDEM_CHECK_SYS(::mprotect(base, d.lease_offset, PROT_READ));
  const std::uint64_t after = d.lease_offset + d.lease_bytes;
  if (size > after) TANDEM_CHECK_SYS(::mprotect(base + after, size - after, PROT_READ));

  r.owner_word_ = slab::own_owner_word();
  r.entries_ = slab::claim_lease_entries(slab::leases_of(r.segment_, d), d.num_leases, leases, r.owner_word_);
  if (r.entries_.size() < leases)
    fail(
        "weight slab '/{}' has no free lease entry: its {} entries are held by live readers; start fewer "
        "actors or give the learner more lease entries",
        name, d.num_leases);
  return r;
}

const DeviceSlabInfo& WeightSlabReader::device_info() const {
  if (!device_) throw std::logic_error("weight slab: device_info() of a host slab");
  return slab::device_info_of(segment_);
}

}  // namespace tandem::shm
