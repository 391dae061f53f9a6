// Deterministic slot contents for the experience ring tests: every field of a slot is a function of
// one seed (the tests use the slot's ring index), so a reader can tell a whole slot from a torn one,
// and a slot written for the wrong index from the right one, without trusting the checksum alone.
#pragma once

#include <cstdint>

#include "shm/experience_ring.hpp"

namespace tandem::test {

struct SlotCounts {
  std::uint64_t obs, actions, steps, logits, values;
};

inline SlotCounts slot_counts(const shm::ExperienceDescriptor& d) {
  const std::uint64_t te = std::uint64_t{d.steps} * d.envs;
  const bool discrete = d.action_kind == static_cast<std::uint32_t>(shm::ActionKind::discrete);
  return {(te + d.envs) * d.obs_dim, discrete ? te : te * d.action_dim, te, te * d.logits_dim, te + d.envs};
}

inline std::uint32_t episodes_for(const shm::ExperienceDescriptor& d, std::uint64_t seed) {
  return static_cast<std::uint32_t>(seed % (d.max_episodes + 1ull));
}

// Writes every field; `policy_version` = seed. Values are small integers and halves: exact in f32.
inline void fill_slot(const shm::SlotView& s, const shm::ExperienceDescriptor& d, std::uint64_t seed) {
  const SlotCounts n = slot_counts(d);
  const float f = static_cast<float>(seed % 1000);
  for (std::uint64_t i = 0; i < n.obs; ++i) s.observations()[i] = f + 0.5f * static_cast<float>(i % 64);
  const bool discrete = d.action_kind == static_cast<std::uint32_t>(shm::ActionKind::discrete);
  for (std::uint64_t i = 0; i < n.actions; ++i) {
    if (discrete) s.discrete_actions()[i] = static_cast<std::int64_t>(seed + i);
    else s.continuous_actions()[i] = f - static_cast<float>(i % 8);
  }
  for (std::uint64_t i = 0; i < n.steps; ++i) {
    s.rewards()[i] = f + static_cast<float>(i % 16);
    s.terminated()[i] = static_cast<std::uint8_t>((seed + i) % 2);
    s.truncated()[i] = static_cast<std::uint8_t>((seed + i) % 3 == 0);
    s.log_probs()[i] = -static_cast<float>(i % 32);
  }
  for (std::uint64_t i = 0; i < n.logits; ++i) s.logits()[i] = f * 0.5f + static_cast<float>(i % 5);
  for (std::uint64_t i = 0; i < n.values; ++i) s.values()[i] = f - static_cast<float>(i % 7);
  const std::uint32_t episodes = episodes_for(d, seed);
  for (std::uint32_t i = 0; i < episodes; ++i) {
    s.episode_returns()[i] = f + static_cast<float>(i);
    s.episode_lengths()[i] = static_cast<std::uint32_t>(seed + i);
  }
  s.header().policy_version = seed;
  s.header().episodes = episodes;
}

// True when every field holds what fill_slot(seed) wrote.
inline bool slot_holds(const shm::SlotView& s, const shm::ExperienceDescriptor& d, std::uint64_t seed) {
  const SlotCounts n = slot_counts(d);
  const float f = static_cast<float>(seed % 1000);
  bool ok = s.header().policy_version == seed && s.header().episodes == episodes_for(d, seed);
  for (std::uint64_t i = 0; ok && i < n.obs; ++i) ok = s.observations()[i] == f + 0.5f * static_cast<float>(i % 64);
  const bool discrete = d.action_kind == static_cast<std::uint32_t>(shm::ActionKind::discrete);
  for (std::uint64_t i = 0; ok && i < n.actions; ++i)
    ok = discrete ? s.discrete_actions()[i] == static_cast<std::int64_t>(seed + i)
                  : s.continuous_actions()[i] == f - static_cast<float>(i % 8);
  for (std::uint64_t i = 0; ok && i < n.steps; ++i)
    ok = s.rewards()[i] == f + static_cast<float>(i % 16) && s.terminated()[i] == (seed + i) % 2 &&
         s.truncated()[i] == ((seed + i) % 3 == 0) && s.log_probs()[i] == -static_cast<float>(i % 32);
  for (std::uint64_t i = 0; ok && i < n.logits; ++i) ok = s.logits()[i] == f * 0.5f + static_cast<float>(i % 5);
  for (std::uint64_t i = 0; ok && i < n.values; ++i) ok = s.values()[i] == f - static_cast<float>(i % 7);
  for (std::uint32_t i = 0; ok && i < s.header().episodes; ++i)
    ok = s.episode_returns()[i] == f + static_cast<float>(i) && s.episode_lengths()[i] == seed + i;
  return ok;
}

}  // namespace tandem::test
