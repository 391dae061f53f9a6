// Experience rings `/tandem.<job>.exp`: one single-producer single-consumer ring of fixed-size
// trajectory slots per rollout actor, consumed zero-copy by the learner. Format:
// experience_ring_format.hpp and docs/FORMAT.md, "Experience rings".
//
// The contract
//  * Processes. The learner creates the segment (ExperienceRings::create) and is the one consumer of
//    every ring: peek / verify / release from one thread. Actor a is the one producer of ring a
//    (ExperienceWriter::attach(job, a)), from one thread. Two live writers on one ring are misuse.
//  * head (RingControl, actor's cache line) counts committed slots; only the actor writes it. tail
//    (the learner's cache line) counts consumed slots; only the learner writes it. Slot i of the ring
//    lives at index i % slots_per_ring. tail <= head <= tail + slots_per_ring.
//  * Producer: begin_write loads tail with acquire (so the learner's reads of a released slot happen
//    before the slot is overwritten) and hands out the slot at head, or nothing when the ring is full
//    (backpressure: full_waits += 1, relaxed). The actor fills the slot in place with plain stores;
//    commit() stores seq = head, computes XXH3-64 over slot bytes [8, slot_bytes), stores it as the
//    checksum, then stores head + 1 with release. A writer killed before that store leaves head
//    unchanged: the half-written slot is never visible, and a restarted writer attaches, reads head
//    and writes that same slot again from the start.
//  * Consumer: peek loads head with acquire (the slot's bytes are then visible) and returns the slot
//    at tail if tail < head. verify() recomputes the checksum and checks seq; a slot that fails is
//    counted (refused += 1) and must not be used as data; the learner releases it all the same, so
//    the ring keeps moving. release() stores tail + 1 with release; the slot may be overwritten from
//    then on, so views into it must not be used after release.
//  * No locks: a process killed at any instruction leaves every ring usable. A head or tail outside
//    the invariant above (a corrupt segment) is a UserError naming the segment, never a wild read.
//  * Attach validates every descriptor field against the mapping with checked arithmetic: a crafted
//    or stale segment is a one-line UserError naming the segment and the fix.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "shm/experience_ring_format.hpp"
#include "shm/segment.hpp"

namespace tandem::shm {

// One slot, in place. Pointers stay valid until the slot is committed (writer) or released (reader).
class SlotView {
 public:
  SlotView(std::byte* slot, const ExperienceDescriptor* d, std::uint64_t index) : slot_(slot), d_(d), index_(index) {}

  std::uint64_t index() const { return index_; }  // position in the ring's sequence (head or tail)
  TrajectoryHeader& header() const { return *reinterpret_cast<TrajectoryHeader*>(slot_); }
  std::byte* bytes() const { return slot_; }
  float* observations() const { return at<float>(d_->observations_offset); }
  std::int64_t* discrete_actions() const { return at<std::int64_t>(d_->actions_offset); }
  float* continuous_actions() const { return at<float>(d_->actions_offset); }
  float* rewards() const { return at<float>(d_->rewards_offset); }
  std::uint8_t* terminated() const { return at<std::uint8_t>(d_->terminated_offset); }
  std::uint8_t* truncated() const { return at<std::uint8_t>(d_->truncated_offset); }
  float* log_probs() const { return at<float>(d_->log_probs_offset); }
  float* logits() const { return at<float>(d_->logits_offset); }
  float* values() const { return at<float>(d_->values_offset); }
  float* episode_returns() const { return at<float>(d_->episode_returns_offset); }
  std::uint32_t* episode_lengths() const { return at<std::uint32_t>(d_->episode_lengths_offset); }
  float* final_observations() const { return at<float>(d_->final_observations_offset); }

 private:
  template <class T>
  T* at(std::uint64_t offset) const {
    return reinterpret_cast<T*>(slot_ + offset);
  }
  std::byte* slot_;
  const ExperienceDescriptor* d_;
  std::uint64_t index_;
};

// XXH3-64 of slot bytes [8, slot_bytes): what commit() stores and verify() recomputes.
std::uint64_t slot_checksum(const std::byte* slot, const ExperienceDescriptor& d);

// The learner's handle: owns the segment it created (unlinked when destroyed), or an attached one.
class ExperienceRings {
 public:
  static ExperienceRings create(std::string_view job, const ExperienceShape& shape);
  static ExperienceRings attach(std::string_view job);

  const ExperienceDescriptor& descriptor() const { return segment_.descriptor_as<ExperienceDescriptor>(); }
  const std::string& segment_name() const { return segment_.name(); }
  RingControl& ring(std::uint32_t actor) const;
  Segment& segment() { return segment_; }  // to persist() it, or host-register its mapping

  // The slot `ahead` places past tail if the actor has committed it; else nothing. A learner may hold
  // several slots of a ring (ahead = 0, 1, ...) and release them oldest first.
  [[nodiscard]] std::optional<SlotView> peek(std::uint32_t actor, std::uint64_t ahead = 0) const;
  // True if the slot's checksum and seq match; false counts a refusal (the slot is not data).
  [[nodiscard]] bool verify(std::uint32_t actor, const SlotView& slot) const;
  void release(std::uint32_t actor) const;  // tail += 1 (release)

 private:
  explicit ExperienceRings(Segment segment) : segment_(std::move(segment)) {}
  Segment segment_;
};

// Actor a's producer handle on ring a.
class ExperienceWriter {
 public:
  static ExperienceWriter attach(std::string_view job, std::uint32_t actor);

  const ExperienceDescriptor& descriptor() const { return segment_.descriptor_as<ExperienceDescriptor>(); }
  RingControl& ring() const;
  std::uint32_t actor() const { return actor_; }

  // The slot at head to fill in place, or nothing when the ring is full (counted in full_waits).
  [[nodiscard]] std::optional<SlotView> begin_write();
  // Marks the first slot since attach (writer_start), checksums the slot begun last and publishes it:
  // head += 1 (release).
  void commit(const SlotView& slot);

 private:
  ExperienceWriter(Segment segment, std::uint32_t actor) : segment_(std::move(segment)), actor_(actor) {}
  Segment segment_;
  std::uint32_t actor_;
  bool committed_since_attach_ = false;
};

}  // namespace tandem::shm
