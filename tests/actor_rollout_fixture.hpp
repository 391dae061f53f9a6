// Shared by the rollout actor and RL evaluator tests: a job config for them, rings shaped like it,
// and a check that replays a slot's actions on fresh envs with the same seeds and demands the slot
// hold exactly what those envs and the acting model give (docs/FORMAT.md "What the steps mean").
#pragma once

#include <torch/types.h>
#include <torch/utils.h>
// After LibTorch: Debian's c10 pulls in glog, whose CHECK must not replace doctest's.
#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <vector>

#include "common/config.hpp"
#include "common/program.hpp"
#include "common/settings/job.hpp"
#include "common/torch/rl_model.hpp"
#include "envs/env_source.hpp"
#include "envs/vec_env.hpp"
#include "shm/experience_ring.hpp"

namespace tandem::test {

inline JobSettings rl_config(const std::string& toml) {
  return JobSettings::parse(Config::parse(toml, "<test>", {}, program_schema()), {});
}

// A job config file as a program reads it, with the job's shape from the environment.
inline JobSettings settings_of(const std::string& path, std::vector<std::string> overrides = {}) {
  return JobSettings::parse(load_program_config(path, overrides), program_shape(1, 1));
}

inline shm::ExperienceShape ring_shape(const envs::EnvSpec& spec, std::uint32_t actors, std::uint32_t slots,
                                       std::uint32_t steps, std::uint32_t envs) {
  const PolicyHead head = policy_head_for(spec);
  shm::ExperienceShape s;
  s.num_actors = actors;
  s.slots_per_ring = slots;
  s.steps = steps;
  s.envs = envs;
  s.obs_dim = static_cast<std::uint32_t>(spec.obs_dim);
  s.action_kind = spec.discrete() ? shm::ActionKind::discrete : shm::ActionKind::continuous;
  s.action_dim = spec.discrete() ? 1 : static_cast<std::uint32_t>(spec.action_dim);
  s.logits_dim = static_cast<std::uint32_t>(head.params_dim());
  return s;
}

// `env` must start where the slot's actor started (same seeds, same number of steps taken before);
// it is stepped through the slot. With a model, values/logits/log_probs are checked against it too.
inline void check_slot_replays(const shm::SlotView& slot, const shm::ExperienceDescriptor& d, envs::VecEnv& env,
                               Model* model) {
  const std::size_t E = d.envs, O = d.obs_dim, T = d.steps, P = d.logits_dim;
  const PolicyHead head = policy_head_for(env.spec());
  std::uint32_t episodes = 0;
  for (std::size_t t = 0; t <= T; ++t) {
    const float* obs = slot.observations() + t * E * O;
    REQUIRE(std::memcmp(obs, env.observations().data(), E * O * sizeof(float)) == 0);  // row t+1 == next obs
    if (model) {
      torch::NoGradGuard no_grad;
      const torch::Tensor x = torch::from_blob(const_cast<float*>(obs),
                                               rl_model_input_shape(static_cast<std::int64_t>(E), model->spec()));
      const auto heads = model->forward_heads(x);
      const torch::Tensor values = torch::from_blob(slot.values() + t * E, {static_cast<std::int64_t>(E)});
      CHECK(torch::allclose(heads[1].reshape({-1}), values, 1e-6, 1e-6));
      if (t < T) {
        const torch::Tensor params = torch::from_blob(slot.logits() + t * E * P,
                                                      {static_cast<std::int64_t>(E), static_cast<std::int64_t>(P)});
        CHECK(torch::allclose(heads[0], params, 1e-6, 1e-6));
        const torch::Tensor actions = head.is_continuous()
                                          ? torch::from_blob(slot.continuous_actions() + t * E * head.action_dim(),
                                                             {static_cast<std::int64_t>(E), head.action_dim()})
                                          : torch::from_blob(slot.discrete_actions() + t * E,
                                                             {static_cast<std::int64_t>(E)}, torch::kInt64);
        const torch::Tensor lp = torch::from_blob(slot.log_probs() + t * E, {static_cast<std::int64_t>(E)});
        CHECK(torch::allclose(head.log_prob(params, actions), lp, 1e-5, 1e-5));
      }
    }
    if (t == T) break;
    bool ok = false;
    if (head.is_continuous()) {
      ok = env.step(
          std::span<const float>(slot.continuous_actions() + t * E * head.action_dim(), E * head.action_dim()));
    } else {
      std::vector<std::int32_t> a(E);
      for (std::size_t e = 0; e < E; ++e) a[e] = static_cast<std::int32_t>(slot.discrete_actions()[t * E + e]);
      ok = env.step(std::span<const std::int32_t>(a));
    }
    REQUIRE(ok);
    for (std::size_t e = 0; e < E; ++e) {
      const std::size_t i = t * E + e;
      CHECK(slot.rewards()[i] == env.rewards()[e]);
      CHECK(slot.terminated()[i] == env.terminated()[e]);
      CHECK(slot.truncated()[i] == env.truncated()[e]);
      const float* final_obs = slot.final_observations() + i * O;
      if (env.done(static_cast<int>(e))) {
        CHECK(std::memcmp(final_obs, env.final_observations().data() + e * O, O * sizeof(float)) == 0);
        CHECK(slot.episode_returns()[episodes] == static_cast<float>(env.episode_returns()[e]));
        CHECK(slot.episode_lengths()[episodes] == static_cast<std::uint32_t>(env.episode_lengths()[e]));
        ++episodes;
      } else {
        for (std::size_t k = 0; k < O; ++k) CHECK(final_obs[k] == 0.0f);
      }
    }
  }
  CHECK(slot.header().episodes == episodes);
  for (std::uint32_t i = episodes; i < d.max_episodes; ++i) CHECK(slot.episode_lengths()[i] == 0u);
}

}  // namespace tandem::test
