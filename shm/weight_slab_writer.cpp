// The writer's side of the weight slab: choosing a slot, the seqlock around a write, committing.
// Leases it must respect (and reclaim): weight_slab_leases.cpp.
#include <fmt/format.h>

#include <algorithm>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.hpp"
#include "shm/weight_slab.hpp"
#include "shm/weight_slab_layout.hpp"

namespace tandem::shm {
namespace {
std::mutex g_live_mutex;
std::multiset<std::string> g_live;  // names of this process's live writers
}  // namespace

LiveWriterMark::LiveWriterMark(std::string name) : name_(std::move(name)) {
  const std::lock_guard lock(g_live_mutex);
  g_live.insert(name_);
}
LiveWriterMark::LiveWriterMark(LiveWriterMark&& o) noexcept : name_(std::exchange(o.name_, {})) {}
LiveWriterMark& LiveWriterMark::operator=(LiveWriterMark&& o) noexcept {
  if (this != &o) {
    release();
    name_ = std::exchange(o.name_, {});
  }
  return *this;
}
LiveWriterMark::~LiveWriterMark() { release(); }

void LiveWriterMark::release() noexcept {
  if (name_.empty()) return;
  const std::lock_guard lock(g_live_mutex);
  if (auto it = g_live.find(name_); it != g_live.end()) g_live.erase(it);
  name_.clear();
}

bool LiveWriterMark::held(const std::string& name) {
  const std::lock_guard lock(g_live_mutex);
  return g_live.contains(name);
}

namespace slab {
WeightSlabWriter::Stats stats_of(const Segment& seg, const SlabDescriptor& d) {
  const SlabControl& c = control_of(seg, d);
  return {c.published.load(std::memory_order_relaxed), c.skipped.load(std::memory_order_relaxed),
          c.reclaimed.load(std::memory_order_relaxed), latest_version(c.latest.load(std::memory_order_acquire))};
}
}  // namespace slab

std::byte* WeightSlabWriter::slot_data(std::uint32_t index) const {
  return slots_ + std::uint64_t{index} * descriptor().slot_stride;
}

std::size_t WeightSlabWriter::slots_span_bytes() const { return descriptor().num_slots * descriptor().slot_stride; }

std::uint32_t WeightSlabWriter::leased_mask() const {
  return slab::leased_slots(slab::leases_of(segment_, descriptor()), descriptor());
}

std::optional<WeightSlabWriter::Slot> WeightSlabWriter::begin_write() {
  if (writing_) throw std::logic_error("weight slab: begin_write() while a write is open");
  const SlabDescriptor& d = descriptor();
  SlabControl& control = slab::control_of(segment_, d);

  // Free slots, oldest version first: a lease-free reader of a recent version keeps its copy valid
  // for as long as possible.
  auto candidates = [&](std::uint32_t leased) {
    std::vector<std::uint32_t> out;
    for (std::uint32_t s = 0; s < d.num_slots; ++s)
      if (s != latest_slot_ && !(leased & (1u << s))) out.push_back(s);
    std::sort(out.begin(), out.end(), [&](std::uint32_t a, std::uint32_t b) {
      return slab::slot_header_of(segment_, d, a).version.load(std::memory_order_relaxed) <
             slab::slot_header_of(segment_, d, b).version.load(std::memory_order_relaxed);
    });
    return out;
  };
  auto free_slots = candidates(leased_mask());
  if (free_slots.empty() && reclaim_dead() > 0) free_slots = candidates(leased_mask());

  for (std::uint32_t s : free_slots) {
    SlotHeader& h = slab::slot_header_of(segment_, d, s);
    const std::uint64_t even = h.seq.load(std::memory_order_relaxed);
    h.seq.store(even + 1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_seq_cst);  // pairs with the reader's fence (Dekker)
    if (leased_mask() & (1u << s)) {                      // a reader leased it meanwhile: back off
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
  SlotHeader& h = slab::slot_header_of(segment_, d, slot.index);
  if (!writing_ || h.seq.load(std::memory_order_relaxed) != slot.seq)
    throw std::logic_error("weight slab: commit() of a slot that was not begun");
  if (version <= latest_version_ || bytes > d.slot_bytes)
    throw std::logic_error(
        fmt::format("weight slab: commit of version {} ({} bytes) after version {}", version, bytes, latest_version_));
  h.version.store(version, std::memory_order_relaxed);
  h.step.store(step, std::memory_order_relaxed);
  h.bytes.store(bytes, std::memory_order_relaxed);
  h.snapshot_ns.store(snapshot_ns, std::memory_order_relaxed);
  h.publish_ns.store(monotonic_ns(), std::memory_order_relaxed);
  h.seq.store(slot.seq + 1, std::memory_order_release);
  SlabControl& control = slab::control_of(segment_, d);
  control.latest.store(pack_latest(version, slot.index), std::memory_order_release);
  control.published.fetch_add(1, std::memory_order_relaxed);
  latest_version_ = version;
  latest_slot_ = slot.index;
  writing_ = false;
  slab::wake_waiters(control);
}

void WeightSlabWriter::abort(const Slot& slot) {
  SlotHeader& h = slab::slot_header_of(segment_, descriptor(), slot.index);
  if (!writing_ || h.seq.load(std::memory_order_relaxed) != slot.seq)
    throw std::logic_error("weight slab: abort() of a slot that was not begun");
  // The payload may be half-written: readers must not accept it, so the slot's version becomes 0
  // (never leased, never latest) under a fresh even seq.
  h.version.store(0, std::memory_order_relaxed);
  h.seq.store(slot.seq + 1, std::memory_order_release);
  writing_ = false;
}

WeightSlabWriter::Stats WeightSlabWriter::stats() const { return slab::stats_of(segment_, descriptor()); }

}  // namespace tandem::shm
