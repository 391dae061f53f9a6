// The reader's side of the weight slab: leasing the latest version, the lease-free seqlock copy, and
// inspection. Attaching: weight_slab.cpp; the lease entries themselves: weight_slab_leases.cpp.
#include <fmt/format.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <bit>
#include <chrono>
#include <climits>
#include <cstddef>
#include <cstring>
#include <ctime>
#include <stdexcept>
#include <utility>

#include "common/error.hpp"
#include "shm/weight_slab.hpp"
#include "shm/weight_slab_layout.hpp"

namespace tandem::shm {

namespace {

// `latest` and a slot's byte count live in memory any process of this uid may write: a slot index
// past num_slots or a count past slot_bytes is refused, never used to address memory.
[[noreturn]] void corrupt(const std::string& name, std::string_view what) {
  fail(ErrorKind::corrupt_segment,
       "weight slab '/{}' is corrupt ({}): remove it (`tandem shm rm {}`) and restart the learner", name, what, name);
}

void check_slot(const std::string& name, const SlabDescriptor& d, std::uint32_t slot) {
  if (slot >= d.num_slots) corrupt(name, fmt::format("`latest` names slot {} of {}", slot, d.num_slots));
}

}  // namespace

WeightSlabReader::WeightSlabReader(WeightSlabReader&& o) noexcept
    : segment_(std::move(o.segment_)),
      slots_(o.slots_),
      device_(o.device_),
      entries_(std::move(o.entries_)),
      owner_word_(o.owner_word_) {
  o.entries_.clear();
}
WeightSlabReader& WeightSlabReader::operator=(WeightSlabReader&& o) noexcept {
  std::swap(segment_, o.segment_);
  std::swap(slots_, o.slots_);
  std::swap(device_, o.device_);
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
  check_slot(name(), descriptor(), index);
  if (slots_ == nullptr) throw std::logic_error("weight slab: a device slab's slots read before bind_device_slots()");
  return slots_ + std::uint64_t{index} * descriptor().slot_stride;
}
std::size_t WeightSlabReader::slots_span_bytes() const { return descriptor().num_slots * descriptor().slot_stride; }

std::uint64_t WeightSlabReader::latest_version() const {
  return shm::latest_version(slab::control_of(segment_, descriptor()).latest.load(std::memory_order_acquire));
}

std::uint64_t WeightSlabReader::wait_newer(std::uint64_t newer_than, std::chrono::nanoseconds limit) const {
  const SlabControl& control = slab::control_of(segment_, descriptor());
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    const std::uint64_t latest = control.latest.load(std::memory_order_acquire);
    const auto left = deadline - std::chrono::steady_clock::now();
    if (shm::latest_version(latest) > newer_than || left <= std::chrono::nanoseconds::zero())
      return shm::latest_version(latest);
    slab::wait_for_commit(control, latest, std::chrono::duration_cast<std::chrono::nanoseconds>(left));
  }
}

namespace slab {
// `latest` packs version << 8 | slot: its low 32 bits change with every commit, so they are the futex
// word (a 32-bit futex on the atomic's first bytes: little-endian only).
static_assert(std::endian::native == std::endian::little);
static_assert(offsetof(SlabControl, latest) == 0);

namespace {
std::uint32_t* futex_word(const SlabControl& control) {
  return const_cast<std::uint32_t*>(reinterpret_cast<const std::uint32_t*>(&control.latest));
}
}  // namespace

void wake_waiters(SlabControl& control) {
  // A wake with nobody waiting is one short syscall, once per commit.
  ::syscall(SYS_futex, futex_word(control), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

void wait_for_commit(const SlabControl& control, std::uint64_t seen, std::chrono::nanoseconds limit) {
  const auto s = std::chrono::duration_cast<std::chrono::seconds>(limit);
  timespec ts{static_cast<time_t>(s.count()), static_cast<long>((limit - s).count())};
  // EAGAIN (a commit came first), ETIMEDOUT and EINTR all mean: look again.
  ::syscall(SYS_futex, futex_word(control), FUTEX_WAIT, static_cast<std::uint32_t>(seen), &ts, nullptr, 0);
}
}  // namespace slab

std::optional<ReadLease> WeightSlabReader::lease_latest(int attempts) {
  const SlabDescriptor& d = descriptor();
  if (slots_ == nullptr)
    throw std::logic_error("weight slab: lease_latest() on a device slab before bind_device_slots()");
  LeaseEntry* entry = nullptr;
  for (LeaseEntry* e : entries_)
    if (e->lease.load(std::memory_order_relaxed) == 0) {
      entry = e;
      break;
    }
  if (entry == nullptr) return std::nullopt;
  const std::uint64_t pid = owner_word_ & 0xffffffffu;
  const SlabControl& control = slab::control_of(segment_, d);

  for (int attempt = 0; attempt < attempts; ++attempt) {
    const std::uint64_t latest = control.latest.load(std::memory_order_acquire);
    if (latest == 0) return std::nullopt;
    const std::uint32_t slot = latest_slot(latest);
    check_slot(name(), d, slot);
    const std::uint64_t version = shm::latest_version(latest);
    entry->version.store(version, std::memory_order_relaxed);
    entry->lease.store(pid << 32 | (slot + 1), std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_seq_cst);  // pairs with the writer's fence (Dekker)
    const SlotHeader& h = slab::slot_header_of(segment_, d, slot);
    const std::uint64_t seq = h.seq.load(std::memory_order_acquire);
    if ((seq & 1) == 0 && h.version.load(std::memory_order_relaxed) == version) {
      if (h.bytes.load(std::memory_order_relaxed) > d.slot_bytes) {
        entry->lease.store(0, std::memory_order_release);
        corrupt(name(), fmt::format("slot {} claims {} bytes of {}", slot, h.bytes.load(std::memory_order_relaxed),
                                    d.slot_bytes));
      }
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
  if (device_) throw std::logic_error("weight slab: copy_latest() is a host memcpy; a device slab is leased");
  const SlabDescriptor& d = descriptor();
  const std::uint64_t latest = slab::control_of(segment_, d).latest.load(std::memory_order_acquire);
  if (latest == 0) return std::nullopt;
  const std::uint32_t slot = latest_slot(latest);
  check_slot(name(), d, slot);
  const SlotHeader& h = slab::slot_header_of(segment_, d, slot);
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
  const LeaseEntry* table = slab::leases_of(segment_, d);
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

WeightSlabWriter::Stats WeightSlabReader::stats() const { return slab::stats_of(segment_, descriptor()); }

PrivateSlotMapping::PrivateSlotMapping(const WeightSlabReader& reader, const ReadLease& lease) : bytes_(lease.bytes()) {
  if (reader.on_device() || !lease) throw std::logic_error("PrivateSlotMapping: a live lease of a host slab");
  const SlabDescriptor& d = reader.descriptor();
  mapped_ = static_cast<std::size_t>(align_up(d.slot_bytes, 4096));
  const auto offset = static_cast<off_t>(d.slots_offset + std::uint64_t{lease.slot()} * d.slot_stride);
  void* p = ::mmap(nullptr, mapped_, PROT_READ | PROT_WRITE, MAP_PRIVATE, reader.fd(), offset);
  if (p == MAP_FAILED) TANDEM_FAIL_SYS(errno, "mmap(MAP_PRIVATE, /dev/shm/" + reader.name() + ")");
  data_ = static_cast<std::byte*>(p);
}
PrivateSlotMapping::PrivateSlotMapping(PrivateSlotMapping&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)),
      mapped_(std::exchange(o.mapped_, 0)),
      bytes_(std::exchange(o.bytes_, 0)) {}
PrivateSlotMapping& PrivateSlotMapping::operator=(PrivateSlotMapping&& o) noexcept {
  std::swap(data_, o.data_);
  std::swap(mapped_, o.mapped_);
  std::swap(bytes_, o.bytes_);
  return *this;
}
PrivateSlotMapping::~PrivateSlotMapping() {
  if (data_ != nullptr) ::munmap(data_, mapped_);
}

}  // namespace tandem::shm
