// The experience rings' format `/tandem.<job>.exp` (docs/FORMAT.md, "Experience rings"): the bytes
// rollout actors and the learner share, as a Python reader sees them. The contract (who writes what,
// which memory order) is at the top of experience_ring.hpp.
//
// Layout (absolute offsets from the start of the segment):
//   [0, 64)        SegmentHeader (segment.hpp), kind = experience
//   [64, 256)      ExperienceDescriptor: shapes, slot size and every field's offset inside a slot
//   [rings_offset + 256 * a, +256)   RingControl of actor a (rings_offset = payload_offset)
//   [slots_offset + (a * slots_per_ring + s) * slot_stride, + slot_bytes)   slot s of actor a's ring
// A slot is a TrajectoryHeader (64 bytes) then the fields, each 64-byte aligned, in the descriptor's order.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

namespace tandem::shm {

inline constexpr std::uint32_t kExperienceLayoutVersion = 2;
inline constexpr std::uint32_t kMaxRingActors = 4096;
inline constexpr std::uint32_t kMaxRingSlots = 65536;   // per ring
inline constexpr std::uint32_t kMaxRingDim = 1u << 20;  // steps, envs, obs_dim, action_dim, logits_dim
inline constexpr std::uint64_t kMaxSlotBytes = 1ull << 30;
inline constexpr std::uint64_t kFieldAlignment = 64;

enum class ActionKind : std::uint32_t { discrete = 1, continuous = 2 };

struct ExperienceDescriptor {  // at segment byte 64; immutable once ready
  std::uint32_t num_actors;    // rings, one per actor
  std::uint32_t slots_per_ring;
  std::uint32_t steps;  // T
  std::uint32_t envs;   // E
  std::uint32_t obs_dim;
  std::uint32_t action_kind;   // ActionKind
  std::uint32_t action_dim;    // discrete: 1 (one i64 per step and env); continuous: f32 per action
  std::uint32_t logits_dim;    // the behaviour distribution's parameters per step and env
  std::uint32_t max_episodes;  // capacity of the finished-episode arrays: steps * envs
  std::uint32_t ring_bytes;    // sizeof(RingControl) = 256
  std::uint64_t slot_bytes;    // bytes of a slot that the checksum covers the tail of
  std::uint64_t slot_stride;   // slot_bytes rounded up to 64
  std::uint64_t rings_offset;  // RingControl[num_actors], absolute
  std::uint64_t slots_offset;  // slot 0 of ring 0, absolute
  // Inside a slot, from the slot's first byte:
  std::uint64_t observations_offset;        // f32 [T+1, E, obs_dim], row T = the bootstrap observation
  std::uint64_t actions_offset;             // i64 [T, E] or f32 [T, E, action_dim]
  std::uint64_t rewards_offset;             // f32 [T, E]
  std::uint64_t terminated_offset;          // u8 [T, E]
  std::uint64_t truncated_offset;           // u8 [T, E]
  std::uint64_t log_probs_offset;           // f32 [T, E], behaviour log-probabilities
  std::uint64_t logits_offset;              // f32 [T, E, logits_dim]
  std::uint64_t values_offset;              // f32 [T+1, E]
  std::uint64_t episode_returns_offset;     // f32 [max_episodes], first `episodes` valid
  std::uint64_t episode_lengths_offset;     // u32 [max_episodes]
  std::uint64_t final_observations_offset;  // f32 [T, E, obs_dim]: where step t ended an episode, its last observation
  std::uint64_t reserved[4];
};
static_assert(std::is_standard_layout_v<ExperienceDescriptor> && std::is_trivially_copyable_v<ExperienceDescriptor>);
static_assert(offsetof(ExperienceDescriptor, slot_bytes) == 40);
static_assert(offsetof(ExperienceDescriptor, observations_offset) == 72);
static_assert(offsetof(ExperienceDescriptor, episode_lengths_offset) == 144);
static_assert(offsetof(ExperienceDescriptor, final_observations_offset) == 152);
static_assert(sizeof(ExperienceDescriptor) == 192);

struct alignas(64) RingControl {               // 256 bytes per actor
  std::atomic<std::uint64_t> head;             // actor: slots committed, release
  std::atomic<std::uint64_t> full_waits;       // actor: begin_write calls that found the ring full
  std::atomic<std::int32_t> writer_pid;        // actor: the last process that attached as writer
  std::atomic<std::uint32_t> writer_attaches;  // actor: how many times a writer attached
  std::uint64_t reserved0[5];
  std::atomic<std::uint64_t> tail;     // byte 64, learner: slots consumed, release
  std::atomic<std::uint64_t> refused;  // learner: committed slots whose checksum failed
  std::uint64_t reserved1[6];
  std::uint64_t reserved2[16];  // bytes 128..256: room without a layout change
};
static_assert(std::is_standard_layout_v<RingControl>);
static_assert(offsetof(RingControl, full_waits) == 8 && offsetof(RingControl, writer_pid) == 16);
static_assert(offsetof(RingControl, tail) == 64 && offsetof(RingControl, refused) == 72);
static_assert(sizeof(RingControl) == 256);
static_assert(std::atomic<std::uint64_t>::is_always_lock_free && std::atomic<std::int32_t>::is_always_lock_free);

struct TrajectoryHeader {        // slot byte 0, 64 bytes
  std::uint64_t checksum;        // XXH3-64 of slot bytes [8, slot_bytes), written at commit
  std::uint64_t seq;             // the ring index this slot was committed as (head before commit)
  std::uint64_t policy_version;  // weight version that acted
  std::uint32_t episodes;        // finished episodes recorded in this slot, <= max_episodes
  std::uint32_t writer_start;    // 1: the first slot its writer committed since attaching (a new actor
                                 // process, whose envs began new episodes), else 0; written at commit
  std::uint64_t reserved[4];
};
static_assert(std::is_standard_layout_v<TrajectoryHeader> && sizeof(TrajectoryHeader) == 64);
static_assert(offsetof(TrajectoryHeader, seq) == 8 && offsetof(TrajectoryHeader, episodes) == 24);

// What the creator chooses; the rest of the descriptor follows from it.
struct ExperienceShape {
  std::uint32_t num_actors = 1;
  std::uint32_t slots_per_ring = 4;
  std::uint32_t steps = 1;
  std::uint32_t envs = 1;
  std::uint32_t obs_dim = 1;
  ActionKind action_kind = ActionKind::discrete;
  std::uint32_t action_dim = 1;
  std::uint32_t logits_dim = 1;
};

// Fills every derived field of `d` (sizes, offsets) from its shape fields, with checked arithmetic.
// Returns "" on success, else what is wrong ("steps is 0", "a slot would be 3 GiB"), for the caller's
// one-line error. `rings_offset` is the segment's payload offset.
std::string layout_experience(ExperienceDescriptor& d, std::uint64_t rings_offset);
// Bytes from rings_offset to the end of the last slot (valid after layout_experience succeeded).
std::uint64_t experience_payload_bytes(const ExperienceDescriptor& d);

}  // namespace tandem::shm
