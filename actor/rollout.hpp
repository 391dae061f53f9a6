// Rollout: acts a policy on a VecEnv and writes T steps of every env into one experience-ring slot in
// place, laid out as docs/FORMAT.md "What the steps mean" says:
//   observations[t]        what the policy saw at step t; row T = the bootstrap observation
//   actions, log_probs     sampled from PolicyHead over the model's params, which go to `logits`
//   values[t]              V(observations[t]); row T = V(the bootstrap observation)
//   rewards, terminated, truncated   as VecEnv returned them
//   final_observations[t]  where step t ended an episode, VecEnv's final observation; zero elsewhere
//   episode_returns/lengths  the episodes that ended in the slot, in (step, env) order; the unused
//                          entries are zero, so equal runs give byte-identical slots
//   header.policy_version  the version the caller says the model runs
// The policy runs batched over the E envs, one forward per step, under InferenceMode, on the model's
// device (CPU or a GPU); actions are always sampled on the CPU.
//
// Threads: one (the actor's); the Rollout borrows the model and the VecEnv, which must outlive it.
#pragma once

#include <ATen/core/Generator.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "common/torch/models.hpp"
#include "common/torch/policy.hpp"
#include "envs/vec_env.hpp"
#include "shm/experience_ring.hpp"

namespace tandem::actor {

struct SlotStats {
  bool complete = true;        // false: a stop came mid-slot; the slot must not be committed
  std::uint32_t episodes = 0;  // finished in this slot
  double return_sum = 0.0;
  double length_sum = 0.0;
  double policy_s = 0.0;  // in the policy (forward, sampling, writing its outputs)
  double env_s = 0.0;     // stepping the envs and copying their answers in
};

class Rollout {
 public:
  // UserError when the ring's shapes do not fit this env and head (the learner built the rings from
  // a different config): names the segment and both shapes.
  Rollout(Model& model, PolicyHead head, envs::VecEnv& env, const shm::ExperienceDescriptor& ring,
          const std::string& segment, std::optional<at::Generator> generator);

  // Fills `slot` (T steps of every env) and tags it with `version`. `stop`, when given, is asked
  // before each step: a stop leaves the slot incomplete (the env has moved on; nothing is committed).
  SlotStats fill(const shm::SlotView& slot, std::uint64_t version, const std::function<bool()>& stop = {});

 private:
  void act(const float* obs, std::int64_t t, const shm::SlotView& slot);  // row t: policy outputs
  void step_env(std::int64_t t, const shm::SlotView& slot);               // row t: the env's answer

  Model& model_;
  PolicyHead head_;
  envs::VecEnv& env_;
  const shm::ExperienceDescriptor& d_;
  std::optional<at::Generator> generator_;
  torch::Device device_;                // the model's: a GPU forward copies its observations in and its heads out
  std::vector<std::int32_t> discrete_;  // the actions as VecEnv takes them
  std::vector<float> continuous_;
};

}  // namespace tandem::actor
