#include "shm/weight_slab.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <fmt/format.h>
#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <utility>

#include "common/error.hpp"

namespace tandem::shm {
namespace {

constexpr std::size_t kControlBytes = 4096;

std::string fix_for(const std::string& name) {
  return fmt::format("start the learner that publishes '/{}' first, or check the job name", name);
}

// From /proc/<pid>/stat: field 3 (state) and field 22 (start time in clock ticks since boot). With
// the pid, the start time identifies a process even after its pid has been reused.
struct ProcIdentity {
  char state;
  std::uint64_t start_ticks;
};
std::optional<ProcIdentity> proc_identity(std::uint32_t pid) {
  std::ifstream in(fmt::format("/proc/{}/stat", pid));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto close = text.rfind(')');
  if (close == std::string::npos || close + 2 >= text.size()) return std::nullopt;
  std::istringstream fields(text.substr(close + 2));
  std::string field;
  ProcIdentity id{};
  for (int i = 3; i <= 22; ++i) {  // fields after "(comm)" start at number 3
    if (!(fields >> field)) return std::nullopt;
    if (i == 3) id.state = field[0];
  }
  id.start_ticks = std::stoull(field);
  return id;
}

std::uint64_t owner_word_of(std::uint32_t pid) {
  auto id = proc_identity(pid);
  if (!id) throw std::runtime_error(fmt::format("cannot read /proc/{}/stat", pid));
  return (id->start_ticks & 0xffffffffu) << 32 | pid;
}

// Dead = gone, a zombie (killed but not yet reaped), or the pid now names another process.
bool owner_dead(std::uint64_t owner) {
  auto id = proc_identity(static_cast<std::uint32_t>(owner & 0xffffffffu));
  return !id || id->state == 'Z' || id->state == 'X' || (id->start_ticks & 0xffffffffu) != (owner >> 32);
}

SlabControl& control_of(const Segment& seg, const SlabDescriptor& d) {
  return *reinterpret_cast<SlabControl*>(seg.base() + d.control_offset);
}
SlotHeader& slot_header_of(const Segment& seg, const SlabDescriptor& d, std::uint32_t i) {
  return reinterpret_cast<SlotHeader*>(seg.base() + d.control_offset + sizeof(SlabControl))[i];
}
LeaseEntry* leases_of(const Segment& seg, const SlabDescriptor& d) {
  return reinterpret_cast<LeaseEntry*>(seg.base() + d.lease_offset);
}

WeightSlabWriter::Stats stats_of(const Segment& seg, const SlabDescriptor& d) {
  const SlabControl& c = control_of(seg, d);
  return {c.published.load(std::memory_order_relaxed), c.skipped.load(std::memory_order_relaxed),
          c.reclaimed.load(std::memory_order_relaxed),
          latest_version(c.latest.load(std::memory_order_acquire))};
}

void check_spec(const std::string& name, const SlabSpec& spec) {
  if (spec.num_slots < 2 || spec.num_slots > kMaxSlots)
    fail("weight slab '/{}': {} slots asked for, use 2..{} (the latest slot is never rewritten, so 1 cannot publish twice)",
         name, spec.num_slots, kMaxSlots);
  if (spec.num_leases < 1 || spec.num_leases > 65536)
    fail("weight slab '/{}': {} lease entries asked for, use 1..65536", name, spec.num_leases);
  if (spec.slot_bytes == 0) fail("weight slab '/{}': the model has no bytes to publish", name);
  if (spec.model.size() >= sizeof(SlabDescriptor::model))
    fail("weight slab '/{}': model name '{}' is longer than {} characters: shorten it", name, spec.model,
         sizeof(SlabDescriptor::model) - 1);
  for (const TensorSpec& t : spec.tensors) {
    if (t.name.empty() || t.name.size() >= kTensorNameBytes)
      fail("weight slab '/{}': tensor name '{}' must be 1..{} characters", name, t.name, kTensorNameBytes - 1);
    if (t.shape.size() > kTensorMaxDims)
      fail("weight slab '/{}': tensor '{}' has {} dimensions, the slab holds at most {}", name, t.name,
           t.shape.size(), kTensorMaxDims);
    if (t.offset + t.bytes > spec.slot_bytes || t.offset % dtype_size(t.dtype) != 0)
      fail("weight slab '/{}': tensor '{}' at [{}, +{}) does not fit an aligned place in a {}-byte slot",
           name, t.name, t.offset, t.bytes, spec.slot_bytes);
  }
}

}  // namespace

// ---- writer -------------------------------------------------------------------------------------

WeightSlabWriter WeightSlabWriter::create(const std::string& name, const SlabSpec& spec, bool force) {
  check_spec(name, spec);
  if (force && Segment::exists(name)) Segment::unlink(name);

  SlabDescriptor d{};
  std::snprintf(d.model, sizeof d.model, "%s", spec.model.c_str());
  d.model_signature = spec.model_signature;
  d.publish_dtype = spec.publish_dtype;
  d.num_slots = spec.num_slots;
  d.num_leases = spec.num_leases;
  d.num_tensors = static_cast<std::uint32_t>(spec.tensors.size());
  d.slot_bytes = spec.slot_bytes;
  d.slot_stride = align_up(spec.slot_bytes, kSlotAlignment);
  d.control_offset = kPayloadAlignment;  // the segment's payload starts here
  d.lease_offset = d.control_offset + kControlBytes;
  d.lease_bytes = align_up(std::uint64_t{spec.num_leases} * sizeof(LeaseEntry), 4096);
  d.table_offset = d.lease_offset + d.lease_bytes;
  d.slots_offset = align_up(d.table_offset + spec.tensors.size() * sizeof(TensorEntry), kSlotAlignment);
  const std::uint64_t total = d.slots_offset + d.num_slots * d.slot_stride;

  WeightSlabWriter w;
  w.segment_ = Segment::create(name, Kind::weights, kWeightSlabLayoutVersion, total - kPayloadAlignment,
                               "another learner is publishing under this job name: stop it, choose another "
                               "job name, or remove the stale segment with `tandem shm gc`");
  if (w.segment_.header().payload_offset != d.control_offset)
    throw std::logic_error("weight slab: segment payload offset is not 2 MiB");

  auto* table = reinterpret_cast<TensorEntry*>(w.segment_.base() + d.table_offset);
  for (std::size_t i = 0; i < spec.tensors.size(); ++i) {
    const TensorSpec& t = spec.tensors[i];
    TensorEntry e{};
    std::memcpy(e.name, t.name.data(), t.name.size());
    e.dtype = t.dtype;
    e.ndim = static_cast<std::uint32_t>(t.shape.size());
    std::copy(t.shape.begin(), t.shape.end(), e.shape);
    e.offset = t.offset;
    e.bytes = t.bytes;
    table[i] = e;
  }
  d.table_checksum = XXH3_64bits(table, spec.tensors.size() * sizeof(TensorEntry));
  w.segment_.descriptor_as<SlabDescriptor>() = d;
  // ftruncate zero-filled the control block, slot headers and lease table: latest = 0, seq = 0.
  control_of(w.segment_, d).writer_pid.store(static_cast<std::uint64_t>(::getpid()), std::memory_order_relaxed);
  w.segment_.mark_ready();
  return w;
}

std::byte* WeightSlabWriter::slot_data(std::uint32_t index) const {
  const SlabDescriptor& d = descriptor();
  return segment_.base() + d.slots_offset + index * d.slot_stride;
}

std::size_t WeightSlabWriter::slots_span_bytes() const { return descriptor().num_slots * descriptor().slot_stride; }

std::uint32_t WeightSlabWriter::leased_mask() const {
  const SlabDescriptor& d = descriptor();
  const LeaseEntry* leases = leases_of(segment_, d);
  std::uint32_t mask = 0;
  for (std::uint32_t i = 0; i < d.num_leases; ++i) {
    std::uint64_t l = leases[i].lease.load(std::memory_order_acquire);
    const std::uint64_t slot_plus_one = l & 0xffffffffu;
    if (slot_plus_one != 0 && slot_plus_one <= d.num_slots) mask |= 1u << (slot_plus_one - 1);
  }
  return mask;
}

std::optional<WeightSlabWriter::Slot> WeightSlabWriter::begin_write() {
  if (writing_) throw std::logic_error("weight slab: begin_write() while a write is open");
  const SlabDescriptor& d = descriptor();
  SlabControl& control = control_of(segment_, d);

  // Free slots, oldest version first: a lease-free reader of a recent version keeps its copy valid
  // for as long as possible.
  auto candidates = [&](std::uint32_t leased) {
    std::vector<std::uint32_t> out;
    for (std::uint32_t s = 0; s < d.num_slots; ++s)
      if (s != latest_slot_ && !(leased & (1u << s))) out.push_back(s);
    std::sort(out.begin(), out.end(), [&](std::uint32_t a, std::uint32_t b) {
      return slot_header_of(segment_, d, a).version.load(std::memory_order_relaxed) <
             slot_header_of(segment_, d, b).version.load(std::memory_order_relaxed);
    });
    return out;
  };
  auto free_slots = candidates(leased_mask());
  if (free_slots.empty() && reclaim_dead() > 0) free_slots = candidates(leased_mask());

  for (std::uint32_t s : free_slots) {
    SlotHeader& h = slot_header_of(segment_, d, s);
    const std::uint64_t even = h.seq.load(std::memory_order_relaxed);
    h.seq.store(even + 1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_seq_cst);  // pairs with the reader's fence (Dekker)
    if (leased_mask() & (1u << s)) {                     // a reader leased it meanwhile: back off
      h.seq.store(even, std::memory_order_release);
      continue;
    }
    writing_ = true;
    return Slot{s, slot_data(s), even + 1};
  }
  control.skipped.fetch_add(1, std::memory_order_relaxed);
  return std::nullopt;
}

void WeightSlabWriter::commit(const Slot& slot, std::uint64_t version, std::uint64_t step, std::uint64_t bytes,
                              std::uint64_t snapshot_ns) {
  const SlabDescriptor& d = descriptor();
  SlotHeader& h = slot_header_of(segment_, d, slot.index);
  if (!writing_ || h.seq.load(std::memory_order_relaxed) != slot.seq)
    throw std::logic_error("weight slab: commit() of a slot that was not begun");
  if (version <= latest_version_ || bytes > d.slot_bytes)
    throw std::logic_error(fmt::format("weight slab: commit of version {} ({} bytes) after version {}", version,
                                       bytes, latest_version_));
  h.version.store(version, std::memory_order_relaxed);
  h.step.store(step, std::memory_order_relaxed);
  h.bytes.store(bytes, std::memory_order_relaxed);
  h.snapshot_ns.store(snapshot_ns, std::memory_order_relaxed);
  h.publish_ns.store(monotonic_ns(), std::memory_order_relaxed);
  h.seq.store(slot.seq + 1, std::memory_order_release);
  SlabControl& control = control_of(segment_, d);
  control.latest.store(pack_latest(version, slot.index), std::memory_order_release);
  control.published.fetch_add(1, std::memory_order_relaxed);
  latest_version_ = version;
  latest_slot_ = slot.index;
  writing_ = false;
}

void WeightSlabWriter::abort(const Slot& slot) {
  SlotHeader& h = slot_header_of(segment_, descriptor(), slot.index);
  if (!writing_ || h.seq.load(std::memory_order_relaxed) != slot.seq)
    throw std::logic_error("weight slab: abort() of a slot that was not begun");
  // The payload may be half-written: readers must not accept it, so the slot's version becomes 0
  // (never leased, never latest) under a fresh even seq.
  h.version.store(0, std::memory_order_relaxed);
  h.seq.store(slot.seq + 1, std::memory_order_release);
  writing_ = false;
}

std::uint32_t WeightSlabWriter::reclaim_dead() {
  const SlabDescriptor& d = descriptor();
  LeaseEntry* leases = leases_of(segment_, d);
  std::uint32_t cleared = 0;
  for (std::uint32_t i = 0; i < d.num_leases; ++i) {
    std::uint64_t owner = leases[i].owner.load(std::memory_order_acquire);
    if (owner == 0 || !owner_dead(owner)) continue;
    std::uint64_t lease = leases[i].lease.load(std::memory_order_acquire);
    // Only a lease carrying the dead owner's pid is cleared: a new owner's lease never matches.
    if (lease != 0 && (lease >> 32) == (owner & 0xffffffffu) &&
        leases[i].lease.compare_exchange_strong(lease, 0, std::memory_order_acq_rel))
      ++cleared;
    leases[i].owner.compare_exchange_strong(owner, 0, std::memory_order_acq_rel);
  }
  if (cleared > 0) control_of(segment_, d).reclaimed.fetch_add(cleared, std::memory_order_relaxed);
  return cleared;
}

WeightSlabWriter::Stats WeightSlabWriter::stats() const { return stats_of(segment_, descriptor()); }

// ---- reader -------------------------------------------------------------------------------------

WeightSlabReader WeightSlabReader::attach(const std::string& name, std::uint32_t leases) {
  WeightSlabReader r;
  r.segment_ = Segment::attach(name, Kind::weights, kWeightSlabLayoutVersion, Segment::Access::read_write,
                               fix_for(name));
  const SlabDescriptor& d = r.descriptor();
  const std::uint64_t size = r.segment_.size();
  if (d.num_slots < 2 || d.num_slots > kMaxSlots || d.lease_offset % 4096 != 0 || d.lease_bytes % 4096 != 0 ||
      d.lease_offset + d.lease_bytes > size || d.slots_offset + d.num_slots * d.slot_stride > size ||
      d.table_offset + d.num_tensors * sizeof(TensorEntry) > size || d.slot_bytes > d.slot_stride)
    fail("weight slab '/{}' has an inconsistent descriptor: remove it (`tandem shm rm {}`) and restart the learner",
         name, name);

  // Everything but the lease pages becomes read-only for this process (see the contract).
  std::byte* base = r.segment_.base();
  TANDEM_CHECK_SYS(::mprotect(base, d.lease_offset, PROT_READ));
  const std::uint64_t after = d.lease_offset + d.lease_bytes;
  TANDEM_CHECK_SYS(::mprotect(base + after, size - after, PROT_READ));

  const auto pid = static_cast<std::uint32_t>(::getpid());
  r.owner_word_ = owner_word_of(pid);
  LeaseEntry* table = leases_of(r.segment_, d);
  for (std::uint32_t i = 0; i < d.num_leases && r.entries_.size() < leases; ++i) {
    std::uint64_t owner = table[i].owner.load(std::memory_order_acquire);
    if (owner != 0 && !owner_dead(owner)) continue;
    if (!table[i].owner.compare_exchange_strong(owner, r.owner_word_, std::memory_order_acq_rel)) continue;
    table[i].lease.store(0, std::memory_order_release);  // a dead owner's lease dies with it
    table[i].version.store(0, std::memory_order_relaxed);
    r.entries_.push_back(&table[i]);
  }
  if (r.entries_.size() < leases)
    fail("weight slab '/{}' has no free lease entry: its {} entries are held by live readers; start fewer "
         "actors or give the learner more lease entries",
         name, d.num_leases);
  return r;
}

WeightSlabReader::WeightSlabReader(WeightSlabReader&& o) noexcept
    : segment_(std::move(o.segment_)), entries_(std::move(o.entries_)), owner_word_(o.owner_word_) {
  o.entries_.clear();
}
WeightSlabReader& WeightSlabReader::operator=(WeightSlabReader&& o) noexcept {
  std::swap(segment_, o.segment_);
  std::swap(entries_, o.entries_);
  std::swap(owner_word_, o.owner_word_);
  return *this;
}
WeightSlabReader::~WeightSlabReader() {
  for (LeaseEntry* e : entries_) {
    e->lease.store(0, std::memory_order_release);
    e->owner.store(0, std::memory_order_release);
  }
}

std::span<const TensorEntry> WeightSlabReader::tensors() const {
  const SlabDescriptor& d = descriptor();
  return {reinterpret_cast<const TensorEntry*>(segment_.base() + d.table_offset), d.num_tensors};
}

const std::byte* WeightSlabReader::slot_data(std::uint32_t index) const {
  const SlabDescriptor& d = descriptor();
  return segment_.base() + d.slots_offset + index * d.slot_stride;
}
std::size_t WeightSlabReader::slots_span_bytes() const { return descriptor().num_slots * descriptor().slot_stride; }

std::uint64_t WeightSlabReader::latest_version() const {
  return shm::latest_version(control_of(segment_, descriptor()).latest.load(std::memory_order_acquire));
}

std::optional<ReadLease> WeightSlabReader::lease_latest(int attempts) {
  const SlabDescriptor& d = descriptor();
  LeaseEntry* entry = nullptr;
  for (LeaseEntry* e : entries_)
    if (e->lease.load(std::memory_order_relaxed) == 0) {
      entry = e;
      break;
    }
  if (entry == nullptr) return std::nullopt;
  const std::uint64_t pid = owner_word_ & 0xffffffffu;
  const SlabControl& control = control_of(segment_, d);

  for (int attempt = 0; attempt < attempts; ++attempt) {
    const std::uint64_t latest = control.latest.load(std::memory_order_acquire);
    if (latest == 0) return std::nullopt;
    const std::uint32_t slot = latest_slot(latest);
    const std::uint64_t version = shm::latest_version(latest);
    entry->version.store(version, std::memory_order_relaxed);
    entry->lease.store(pid << 32 | (slot + 1), std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_seq_cst);  // pairs with the writer's fence (Dekker)
    const SlotHeader& h = slot_header_of(segment_, d, slot);
    const std::uint64_t seq = h.seq.load(std::memory_order_acquire);
    if ((seq & 1) == 0 && h.version.load(std::memory_order_relaxed) == version) {
      ReadLease lease;
      lease.entry_ = entry;
      lease.header_ = &h;
      lease.data_ = slot_data(slot);
      lease.seq_ = seq;
      lease.version_ = version;
      lease.step_ = h.step.load(std::memory_order_relaxed);
      lease.bytes_ = h.bytes.load(std::memory_order_relaxed);
      lease.snapshot_ns_ = h.snapshot_ns.load(std::memory_order_relaxed);
      lease.publish_ns_ = h.publish_ns.load(std::memory_order_relaxed);
      lease.slot_ = slot;
      return lease;
    }
    entry->lease.store(0, std::memory_order_release);  // the writer overtook us: read `latest` again
  }
  return std::nullopt;
}

std::optional<WeightSlabReader::Copied> WeightSlabReader::copy_latest(std::byte* dst) const {
  const SlabDescriptor& d = descriptor();
  const std::uint64_t latest = control_of(segment_, d).latest.load(std::memory_order_acquire);
  if (latest == 0) return std::nullopt;
  const std::uint32_t slot = latest_slot(latest);
  const SlotHeader& h = slot_header_of(segment_, d, slot);
  const std::uint64_t seq = h.seq.load(std::memory_order_acquire);
  if (seq & 1) return std::nullopt;
  Copied c{h.version.load(std::memory_order_relaxed), h.step.load(std::memory_order_relaxed),
           h.bytes.load(std::memory_order_relaxed), h.snapshot_ns.load(std::memory_order_relaxed),
           h.publish_ns.load(std::memory_order_relaxed)};
  if (c.version == 0 || c.bytes > d.slot_bytes) return std::nullopt;
  std::memcpy(dst, slot_data(slot), c.bytes);
  std::atomic_thread_fence(std::memory_order_acquire);
  if (h.seq.load(std::memory_order_relaxed) != seq) return std::nullopt;
  return c;
}

std::vector<LeaseInfo> WeightSlabReader::lease_table() const {
  const SlabDescriptor& d = descriptor();
  const LeaseEntry* table = leases_of(segment_, d);
  std::vector<LeaseInfo> rows;
  for (std::uint32_t i = 0; i < d.num_leases; ++i) {
    std::uint64_t owner = table[i].owner.load(std::memory_order_acquire);
    if (owner == 0) continue;
    std::uint64_t lease = table[i].lease.load(std::memory_order_acquire);
    rows.push_back({static_cast<std::uint32_t>(owner & 0xffffffffu), lease != 0,
                    lease != 0 ? static_cast<std::uint32_t>((lease & 0xffffffffu) - 1) : 0,
                    table[i].version.load(std::memory_order_relaxed)});
  }
  return rows;
}

WeightSlabWriter::Stats WeightSlabReader::stats() const { return stats_of(segment_, descriptor()); }

// ---- leases -------------------------------------------------------------------------------------

ReadLease::ReadLease(ReadLease&& o) noexcept { *this = std::move(o); }
ReadLease& ReadLease::operator=(ReadLease&& o) noexcept {
  if (this != &o) {
    release();
    entry_ = std::exchange(o.entry_, nullptr);
    header_ = o.header_;
    data_ = o.data_;
    seq_ = o.seq_;
    version_ = o.version_;
    step_ = o.step_;
    bytes_ = o.bytes_;
    snapshot_ns_ = o.snapshot_ns_;
    publish_ns_ = o.publish_ns_;
    slot_ = o.slot_;
  }
  return *this;
}
ReadLease::~ReadLease() { release(); }

void ReadLease::release() {
  // release: our reads of the slot happen-before the writer's next overwrite of it.
  if (entry_ != nullptr) std::exchange(entry_, nullptr)->lease.store(0, std::memory_order_release);
}

bool ReadLease::still_valid() const {
  std::atomic_thread_fence(std::memory_order_acquire);
  return header_ != nullptr && header_->seq.load(std::memory_order_relaxed) == seq_;
}

// ---- verify pattern -----------------------------------------------------------------------------

void fill_verify_pattern(std::byte* data, std::size_t bytes, std::uint64_t version) {
  if (bytes < 16) throw std::invalid_argument("verify pattern needs at least 16 bytes");
  std::memset(data + 8, verify_byte(version), bytes - 16);
  std::memcpy(data, &version, 8);
  std::memcpy(data + bytes - 8, &version, 8);
}

bool check_verify_pattern(const std::byte* data, std::size_t bytes, std::uint64_t version) {
  if (bytes < 16) return false;
  std::uint64_t head = 0, tail = 0;
  std::memcpy(&head, data, 8);
  std::memcpy(&tail, data + bytes - 8, 8);
  if (head != version || tail != version) return false;
  static constexpr std::size_t kChunk = 4096;
  std::byte expect[kChunk];
  std::memset(expect, verify_byte(version), kChunk);
  for (std::size_t off = 8; off < bytes - 8; off += kChunk) {
    std::size_t n = std::min(kChunk, bytes - 8 - off);
    if (std::memcmp(data + off, expect, n) != 0) return false;
  }
  return true;
}

}  // namespace tandem::shm
