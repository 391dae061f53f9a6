// Private to the weight slab's .cpp files and its tests: where each region of a mapped slab lies (from its
// descriptor), the lease-owner words, and the checks shared by the writer and reader sides.
// The layout and the meaning of every atomic are weight_slab.hpp's contract; nothing here adds to it.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "shm/segment.hpp"
#include "shm/weight_slab.hpp"

namespace tandem::shm::slab {

inline constexpr std::size_t kControlBytes = 4096;  // SlabControl + SlotHeader[kMaxSlots]

inline SlabControl& control_of(const Segment& seg, const SlabDescriptor& d) {
  return *reinterpret_cast<SlabControl*>(seg.base() + d.control_offset);
}
inline SlotHeader& slot_header_of(const Segment& seg, const SlabDescriptor& d, std::uint32_t i) {
  return reinterpret_cast<SlotHeader*>(seg.base() + d.control_offset + sizeof(SlabControl))[i];
}
inline LeaseEntry* leases_of(const Segment& seg, const SlabDescriptor& d) {
  return reinterpret_cast<LeaseEntry*>(seg.base() + d.lease_offset);
}
inline DeviceSlabInfo& device_info_of(const Segment& seg) {
  return *reinterpret_cast<DeviceSlabInfo*>(seg.descriptor() + kDeviceInfoOffset);
}

WeightSlabWriter::Stats stats_of(const Segment& seg, const SlabDescriptor& d);

// ---- commit wake-ups (weight_slab_reader.cpp): futex on the low 32 bits of `latest` ----

// Wakes every reader sleeping in wait_for_commit (FUTEX_WAKE, shared: any process).
void wake_waiters(SlabControl& control);
// Sleeps while the low 32 bits of `latest` still equal those of `seen`, for at most `limit`
// (FUTEX_WAIT; returns early on a wake, a signal or a spurious wake-up: callers recheck).
void wait_for_commit(const SlabControl& control, std::uint64_t seen, std::chrono::nanoseconds limit);

// ---- leases (weight_slab_leases.cpp) ----

// This process's owner word: pid | (start ticks & 0xffffffff) << 32 (see LeaseEntry).
std::uint64_t own_owner_word();
// Dead = not alive by process_alive's rule (gone, a zombie, or the pid now names another process).
bool owner_dead(std::uint64_t owner);
// Claims up to `wanted` entries whose owner is absent or dead (CAS), clearing their leases.
std::vector<LeaseEntry*> claim_lease_entries(LeaseEntry* table, std::uint32_t count, std::uint32_t wanted,
                                             std::uint64_t owner);
// Frees `entry`, whose owner word was `dead_owner` when found dead, clearing its lease (true when it
// held one): CAS owner dead_owner -> `reclaimer` (the writer's own word), clear lease, owner = 0
// (release). Does nothing (false) when the owner word changed meanwhile: a reader claimed the entry.
bool reclaim_entry(LeaseEntry& entry, std::uint64_t dead_owner, std::uint64_t reclaimer);
// Bit s set = some entry leases slot s (acquire loads; the writer's half of the Dekker pairing).
std::uint32_t leased_slots(const LeaseEntry* table, const SlabDescriptor& d);

}  // namespace tandem::shm::slab
