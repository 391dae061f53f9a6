// Leases: who owns which lease entry (pid + start time, so a reused pid is not mistaken for its dead
// predecessor), which slots readers pin, how dead owners' entries come back, and the ReadLease
// handle. The protocol (Dekker pairing with the writer) is weight_slab.hpp's contract.
#include <unistd.h>

#include <fmt/format.h>

#include <stdexcept>
#include <utility>

#include "common/process.hpp"
#include "shm/weight_slab.hpp"
#include "shm/weight_slab_layout.hpp"

namespace tandem::shm {

namespace slab {

std::uint64_t own_owner_word() {
  const auto pid = static_cast<std::uint32_t>(::getpid());
  auto id = process_identity(pid);
  if (!id) throw std::runtime_error(fmt::format("cannot read /proc/{}/stat", pid));
  return (id->start_ticks & 0xffffffffu) << 32 | pid;
}

bool owner_dead(std::uint64_t owner) {
  return !process_alive(static_cast<std::uint32_t>(owner & 0xffffffffu), owner >> 32, 0xffffffffu);
}

std::vector<LeaseEntry*> claim_lease_entries(LeaseEntry* table, std::uint32_t count, std::uint32_t wanted,
                                             std::uint64_t owner_word) {
  std::vector<LeaseEntry*> claimed;
  for (std::uint32_t i = 0; i < count && claimed.size() < wanted; ++i) {
    std::uint64_t owner = table[i].owner.load(std::memory_order_acquire);
    if (owner != 0 && !owner_dead(owner)) continue;
    if (!table[i].owner.compare_exchange_strong(owner, owner_word, std::memory_order_acq_rel)) continue;
    table[i].lease.store(0, std::memory_order_release);  // a dead owner's lease dies with it
    table[i].version.store(0, std::memory_order_relaxed);
    claimed.push_back(&table[i]);
  }
  return claimed;
}

bool reclaim_entry(LeaseEntry& entry, std::uint64_t dead_owner, std::uint64_t reclaimer) {
  // Claim first: once `owner` holds the writer's (live) word no reader can take the entry, and only
  // the dead owner ever wrote its lease, so the lease cleared next is the dead owner's. A reader that
  // claimed the entry between the writer's check and this CAS (its pid may be the dead owner's,
  // reused) makes the CAS fail and keeps the entry and its lease.
  if (!entry.owner.compare_exchange_strong(dead_owner, reclaimer, std::memory_order_acq_rel)) return false;
  const bool had_lease = entry.lease.exchange(0, std::memory_order_relaxed) != 0;
  entry.version.store(0, std::memory_order_relaxed);
  entry.owner.store(0, std::memory_order_release);  // free: a claimer sees the cleared lease
  return had_lease;
}

std::uint32_t leased_slots(const LeaseEntry* table, const SlabDescriptor& d) {
  std::uint32_t mask = 0;
  for (std::uint32_t i = 0; i < d.num_leases; ++i) {
    std::uint64_t l = table[i].lease.load(std::memory_order_acquire);
    const std::uint64_t slot_plus_one = l & 0xffffffffu;
    if (slot_plus_one != 0 && slot_plus_one <= d.num_slots) mask |= 1u << (slot_plus_one - 1);
  }
  return mask;
}

}  // namespace slab

std::uint32_t WeightSlabWriter::reclaim_dead() {
  const SlabDescriptor& d = descriptor();
  LeaseEntry* leases = slab::leases_of(segment_, d);
  std::uint32_t cleared = 0;
  std::uint64_t self = 0;  // this process's owner word, read from /proc once a dead owner turns up
  for (std::uint32_t i = 0; i < d.num_leases; ++i) {
    const std::uint64_t owner = leases[i].owner.load(std::memory_order_acquire);
    if (owner == 0 || !slab::owner_dead(owner)) continue;
    if (self == 0) self = slab::own_owner_word();
    if (slab::reclaim_entry(leases[i], owner, self)) ++cleared;
  }
  if (cleared > 0) slab::control_of(segment_, d).reclaimed.fetch_add(cleared, std::memory_order_relaxed);
  return cleared;
}

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

}  // namespace tandem::shm
