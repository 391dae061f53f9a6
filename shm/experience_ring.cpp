#include "shm/experience_ring.hpp"

#include <unistd.h>
#include <xxhash.h>

#include <fmt/format.h>

#include <array>
#include <cstring>
#include <limits>
#include <stdexcept>

#include "common/checked_math.hpp"
#include "common/error.hpp"

namespace tandem::shm {

namespace {

constexpr std::string_view kExistsFix =
    "a job with this id is running or crashed: choose another run.job, or remove stale segments with `tandem shm gc`";
constexpr std::string_view kAttachFix =
    "the learner creates the rings: is the job running? restart it if its learner crashed";

std::string out_of_range(std::string_view field, std::uint64_t value, std::uint64_t lo, std::uint64_t hi) {
  if (value >= lo && value <= hi) return "";
  return fmt::format("{} is {} (must be {} to {})", field, value, lo, hi);
}

// The derived fields attach compares, by name, so a mismatch names the field.
struct Derived {
  std::string_view name;
  std::uint64_t ExperienceDescriptor::*member;
};
constexpr std::array kDerived = {
    Derived{"slot_bytes", &ExperienceDescriptor::slot_bytes},
    Derived{"slot_stride", &ExperienceDescriptor::slot_stride},
    Derived{"rings_offset", &ExperienceDescriptor::rings_offset},
    Derived{"slots_offset", &ExperienceDescriptor::slots_offset},
    Derived{"observations_offset", &ExperienceDescriptor::observations_offset},
    Derived{"actions_offset", &ExperienceDescriptor::actions_offset},
    Derived{"rewards_offset", &ExperienceDescriptor::rewards_offset},
    Derived{"terminated_offset", &ExperienceDescriptor::terminated_offset},
    Derived{"truncated_offset", &ExperienceDescriptor::truncated_offset},
    Derived{"log_probs_offset", &ExperienceDescriptor::log_probs_offset},
    Derived{"logits_offset", &ExperienceDescriptor::logits_offset},
    Derived{"values_offset", &ExperienceDescriptor::values_offset},
    Derived{"episode_returns_offset", &ExperienceDescriptor::episode_returns_offset},
    Derived{"episode_lengths_offset", &ExperienceDescriptor::episode_lengths_offset},
    Derived{"final_observations_offset", &ExperienceDescriptor::final_observations_offset},
};

// A validated ring's head and tail; a pair outside tail <= head <= tail + slots means corruption.
void check_positions(const std::string& segment, std::uint32_t actor, std::uint64_t head, std::uint64_t tail,
                     std::uint32_t slots) {
  if (head < tail || head - tail > slots)
    fail(ErrorKind::corrupt_segment,
         "experience rings '/{}': ring {} has head {} and tail {} ({} slots), which no writer produces: the segment "
         "is corrupt; restart the job",
         segment, actor, head, tail, slots);
}

Segment attach_checked(std::string_view job, std::uint32_t* actor) {
  Segment seg = Segment::attach(job_segment_name(job, Kind::experience), Kind::experience, kExperienceLayoutVersion,
                                Segment::Access::read_write, kAttachFix);
  const auto& d = seg.descriptor_as<ExperienceDescriptor>();
  ExperienceDescriptor expected{};
  std::memcpy(&expected, &d, offsetof(ExperienceDescriptor, max_episodes));  // the shape fields
  if (std::string problem = layout_experience(expected, seg.header().payload_offset); !problem.empty())
    fail(ErrorKind::corrupt_segment, "experience rings '/{}' have a bad descriptor: {}: {}", seg.name(), problem,
         kAttachFix);
  if (d.max_episodes != expected.max_episodes || d.ring_bytes != expected.ring_bytes)
    fail(ErrorKind::corrupt_segment,
         "experience rings '/{}' have a bad descriptor: max_episodes {} and ring_bytes {} should be {} and {}: {}",
         seg.name(), d.max_episodes, d.ring_bytes, expected.max_episodes, expected.ring_bytes, kAttachFix);
  for (const auto& f : kDerived)
    if (d.*f.member != expected.*f.member)
      fail(ErrorKind::corrupt_segment, "experience rings '/{}' have a bad descriptor: {} is {}, the shape gives {}: {}",
           seg.name(), f.name, d.*f.member, expected.*f.member, kAttachFix);
  const auto end = checked_add(d.rings_offset, experience_payload_bytes(expected));
  if (!end || *end > seg.size())
    fail(ErrorKind::corrupt_segment, "experience rings '/{}' need {} bytes but the segment has {}: {}", seg.name(),
         end ? fmt::format("{}", *end) : std::string("more than 2^64"), seg.size(), kAttachFix);
  if (actor && *actor >= d.num_actors)
    fail(
        "experience rings '/{}' have {} rings, so actor {} has none: check the actor index against the job's "
        "actor count",
        seg.name(), d.num_actors, *actor);
  return seg;
}

RingControl& ring_at(const Segment& seg, std::uint32_t actor) {
  const auto& d = seg.descriptor_as<ExperienceDescriptor>();
  if (actor >= d.num_actors) throw std::out_of_range(fmt::format("experience ring {}", actor));
  return reinterpret_cast<RingControl*>(seg.base() + d.rings_offset)[actor];
}

std::byte* slot_at(const Segment& seg, std::uint32_t actor, std::uint64_t index) {
  const auto& d = seg.descriptor_as<ExperienceDescriptor>();
  const std::uint64_t slot = std::uint64_t{actor} * d.slots_per_ring + index % d.slots_per_ring;
  return seg.base() + d.slots_offset + slot * d.slot_stride;
}

}  // namespace

std::string layout_experience(ExperienceDescriptor& d, std::uint64_t rings_offset) {
  for (const std::string& problem :
       {out_of_range("num_actors", d.num_actors, 1, kMaxRingActors),
        out_of_range("slots_per_ring", d.slots_per_ring, 1, kMaxRingSlots),
        out_of_range("steps", d.steps, 1, kMaxRingDim), out_of_range("envs", d.envs, 1, kMaxRingDim),
        out_of_range("obs_dim", d.obs_dim, 1, kMaxRingDim), out_of_range("logits_dim", d.logits_dim, 1, kMaxRingDim),
        out_of_range("action_kind", d.action_kind, 1, 2),
        d.action_kind == static_cast<std::uint32_t>(ActionKind::discrete)
            ? out_of_range("action_dim of discrete actions", d.action_dim, 1, 1)
            : out_of_range("action_dim", d.action_dim, 1, kMaxRingDim)})
    if (!problem.empty()) return problem;
  const std::uint64_t T = d.steps, E = d.envs;
  const std::uint64_t steps_envs = T * E;  // both <= 2^20: no wrap
  if (steps_envs > std::numeric_limits<std::uint32_t>::max())
    return fmt::format("steps x envs is {} (at most 2^32 - 1)", steps_envs);
  d.max_episodes = static_cast<std::uint32_t>(steps_envs);
  d.ring_bytes = sizeof(RingControl);
  const bool discrete = d.action_kind == static_cast<std::uint32_t>(ActionKind::discrete);

  std::uint64_t cursor = sizeof(TrajectoryHeader), last_end = cursor;
  std::string too_big;
  auto place = [&](std::uint64_t& offset, std::optional<std::uint64_t> bytes) {
    if (!too_big.empty()) return;
    const auto end = bytes ? checked_add(cursor, *bytes) : std::nullopt;
    if (!end || *end > kMaxSlotBytes) {
      too_big = fmt::format("a slot would exceed {} bytes (steps {}, envs {}, obs_dim {}, logits_dim {})",
                            kMaxSlotBytes, d.steps, d.envs, d.obs_dim, d.logits_dim);
      return;
    }
    offset = cursor;
    last_end = *end;
    cursor = align_up(*end, kFieldAlignment);
  };
  place(d.observations_offset, checked_product(4, {T + 1, E, d.obs_dim}));
  place(d.actions_offset, discrete ? checked_product(8, {T, E}) : checked_product(4, {T, E, d.action_dim}));
  place(d.rewards_offset, checked_product(4, {T, E}));
  place(d.terminated_offset, checked_product(1, {T, E}));
  place(d.truncated_offset, checked_product(1, {T, E}));
  place(d.log_probs_offset, checked_product(4, {T, E}));
  place(d.logits_offset, checked_product(4, {T, E, d.logits_dim}));
  place(d.values_offset, checked_product(4, {T + 1, E}));
  place(d.episode_returns_offset, checked_product(4, {steps_envs}));
  place(d.episode_lengths_offset, checked_product(4, {steps_envs}));
  place(d.final_observations_offset, checked_product(4, {T, E, d.obs_dim}));
  if (!too_big.empty()) return too_big;
  d.slot_bytes = last_end;
  d.slot_stride = cursor;
  d.rings_offset = rings_offset;
  const auto slots_offset = checked_add(rings_offset, std::uint64_t{d.num_actors} * sizeof(RingControl));
  if (!slots_offset) return fmt::format("rings_offset {} is past the end of any segment", rings_offset);
  d.slots_offset = *slots_offset;
  std::memset(d.reserved, 0, sizeof d.reserved);
  return "";
}

std::uint64_t experience_payload_bytes(const ExperienceDescriptor& d) {
  // Shape caps: 2^12 actors x 2^16 slots x 2^30 bytes = 2^58, plus the controls: no wrap.
  return std::uint64_t{d.num_actors} * sizeof(RingControl) +
         std::uint64_t{d.num_actors} * d.slots_per_ring * d.slot_stride;
}

std::uint64_t slot_checksum(const std::byte* slot, const ExperienceDescriptor& d) {
  return XXH3_64bits(slot + sizeof(std::uint64_t), d.slot_bytes - sizeof(std::uint64_t));
}

ExperienceRings ExperienceRings::create(std::string_view job, const ExperienceShape& shape) {
  ExperienceDescriptor d{};
  d.num_actors = shape.num_actors;
  d.slots_per_ring = shape.slots_per_ring;
  d.steps = shape.steps;
  d.envs = shape.envs;
  d.obs_dim = shape.obs_dim;
  d.action_kind = static_cast<std::uint32_t>(shape.action_kind);
  d.action_dim = shape.action_dim;
  d.logits_dim = shape.logits_dim;
  // Laid out first with the payload offset every segment uses, so a bad shape fails before creation.
  if (std::string problem = layout_experience(d, kPayloadAlignment); !problem.empty())
    fail("experience rings for job '{}' cannot be laid out: {}: choose smaller rollouts or fewer slots", job, problem);
  Segment seg = Segment::create(job_segment_name(job, Kind::experience), Kind::experience, kExperienceLayoutVersion,
                                experience_payload_bytes(d), kExistsFix);
  // The real payload offset moves rings_offset and slots_offset only, never the size reserved above.
  (void)layout_experience(d, seg.header().payload_offset);
  seg.descriptor_as<ExperienceDescriptor>() = d;
  // The mapping is fresh zeros: head = tail = 0 and every counter 0 already.
  seg.mark_ready();  // release: the descriptor is visible to attachers
  return ExperienceRings(std::move(seg));
}

ExperienceRings ExperienceRings::attach(std::string_view job) { return ExperienceRings(attach_checked(job, nullptr)); }

RingControl& ExperienceRings::ring(std::uint32_t actor) const { return ring_at(segment_, actor); }

std::optional<SlotView> ExperienceRings::peek(std::uint32_t actor, std::uint64_t ahead) const {
  RingControl& r = ring(actor);
  const std::uint64_t tail = r.tail.load(std::memory_order_relaxed);  // ours
  const std::uint64_t head = r.head.load(std::memory_order_acquire);  // the slot's bytes come with it
  check_positions(segment_.name(), actor, head, tail, descriptor().slots_per_ring);
  if (head - tail <= ahead) return std::nullopt;
  return SlotView(slot_at(segment_, actor, tail + ahead), &descriptor(), tail + ahead);
}

bool ExperienceRings::verify(std::uint32_t actor, const SlotView& slot) const {
  const TrajectoryHeader& h = slot.header();
  const bool good = h.seq == slot.index() && h.episodes <= descriptor().max_episodes &&
                    h.checksum == slot_checksum(slot.bytes(), descriptor());
  if (!good) ring(actor).refused.fetch_add(1, std::memory_order_relaxed);
  return good;
}

void ExperienceRings::release(std::uint32_t actor) const {
  RingControl& r = ring(actor);
  const std::uint64_t tail = r.tail.load(std::memory_order_relaxed);
  if (tail == r.head.load(std::memory_order_acquire))
    throw std::logic_error(fmt::format("experience ring {}: release with nothing peeked", actor));
  r.tail.store(tail + 1, std::memory_order_release);  // our reads of the slot happen before its reuse
}

ExperienceWriter ExperienceWriter::attach(std::string_view job, std::uint32_t actor) {
  ExperienceWriter w(attach_checked(job, &actor), actor);
  RingControl& r = w.ring();
  check_positions(w.segment_.name(), actor, r.head.load(std::memory_order_relaxed),
                  r.tail.load(std::memory_order_acquire), w.descriptor().slots_per_ring);
  r.writer_pid.store(static_cast<std::int32_t>(::getpid()), std::memory_order_relaxed);
  r.writer_attaches.fetch_add(1, std::memory_order_relaxed);
  return w;
}

RingControl& ExperienceWriter::ring() const { return ring_at(segment_, actor_); }

std::optional<SlotView> ExperienceWriter::begin_write() {
  RingControl& r = ring();
  const std::uint64_t head = r.head.load(std::memory_order_relaxed);  // ours
  const std::uint64_t tail = r.tail.load(std::memory_order_acquire);  // the learner is done with older slots
  check_positions(segment_.name(), actor_, head, tail, descriptor().slots_per_ring);
  if (head - tail == descriptor().slots_per_ring) {
    r.full_waits.fetch_add(1, std::memory_order_relaxed);
    return std::nullopt;
  }
  return SlotView(slot_at(segment_, actor_, head), &descriptor(), head);
}

void ExperienceWriter::commit(const SlotView& slot) {
  RingControl& r = ring();
  const std::uint64_t head = r.head.load(std::memory_order_relaxed);
  if (slot.index() != head || slot.bytes() != slot_at(segment_, actor_, head))
    throw std::logic_error(
        fmt::format("experience ring {}: commit of slot {} but head is {}", actor_, slot.index(), head));
  TrajectoryHeader& h = slot.header();
  if (h.episodes > descriptor().max_episodes)
    throw std::logic_error(
        fmt::format("experience ring {}: {} episodes in a slot of {}", actor_, h.episodes, descriptor().max_episodes));
  h.seq = head;
  h.writer_start = committed_since_attach_ ? 0 : 1;
  committed_since_attach_ = true;
  h.checksum = slot_checksum(slot.bytes(), descriptor());
  r.head.store(head + 1, std::memory_order_release);
}

}  // namespace tandem::shm
