#include "actor/rollout.hpp"

#include <c10/core/InferenceMode.h>
#include <torch/types.h>

#include <cstring>

#include "common/clock.hpp"
#include "common/error.hpp"
#include "common/torch/rl_model.hpp"

namespace tandem::actor {
namespace {

void copy_floats(float* to, const torch::Tensor& t, std::int64_t n) {
  const torch::Tensor c = t.to(torch::kFloat32).contiguous();
  std::memcpy(to, c.data_ptr<float>(), static_cast<std::size_t>(n) * sizeof(float));
}

}  // namespace

Rollout::Rollout(Model& model, PolicyHead head, envs::VecEnv& env, const shm::ExperienceDescriptor& ring,
                 const std::string& segment, std::optional<at::Generator> generator)
    : model_(model), head_(head), env_(env), d_(ring), generator_(std::move(generator)), device_(model.device()) {
  const envs::EnvSpec& s = env.spec();
  const auto kind = static_cast<std::uint32_t>(s.discrete() ? shm::ActionKind::discrete : shm::ActionKind::continuous);
  const std::uint32_t action_dim = s.discrete() ? 1 : static_cast<std::uint32_t>(s.action_dim);
  if (d_.envs != static_cast<std::uint32_t>(env.size()) || d_.obs_dim != static_cast<std::uint32_t>(s.obs_dim) ||
      d_.action_kind != kind || d_.action_dim != action_dim ||
      d_.logits_dim != static_cast<std::uint64_t>(head.params_dim()))
    fail(
        "experience rings /{} hold {} envs x {} observations, action kind {} x {}, {} policy params; this actor "
        "steps {} envs of '{}' ({} observations, {} x {}, {} params): the learner and the actors must read the "
        "same env.* config",
        segment, d_.envs, d_.obs_dim, d_.action_kind, d_.action_dim, d_.logits_dim, env.size(), s.name, s.obs_dim, kind,
        action_dim, head.params_dim());
  const std::size_t e = static_cast<std::size_t>(env.size());
  if (s.discrete()) discrete_.resize(e);
  else continuous_.resize(e * static_cast<std::size_t>(s.action_dim));
}

SlotStats Rollout::fill(const shm::SlotView& slot, std::uint64_t version, const std::function<bool()>& stop) {
  const std::size_t e = d_.envs, o = d_.obs_dim, steps = d_.steps;
  std::memset(slot.final_observations(), 0, steps * e * o * sizeof(float));
  std::memset(slot.episode_returns(), 0, std::size_t{d_.max_episodes} * sizeof(float));
  std::memset(slot.episode_lengths(), 0, std::size_t{d_.max_episodes} * sizeof(std::uint32_t));
  slot.header().policy_version = version;
  slot.header().episodes = 0;
  std::memcpy(slot.observations(), env_.observations().data(), e * o * sizeof(float));

  c10::InferenceMode inference;
  SlotStats stats;
  for (std::size_t t = 0; t < steps; ++t) {
    if (stop && stop()) {
      stats.complete = false;
      return stats;
    }
    const std::uint64_t start = monotonic_ns();
    act(slot.observations() + t * e * o, static_cast<std::int64_t>(t), slot);
    const std::uint64_t acted = monotonic_ns();
    step_env(static_cast<std::int64_t>(t), slot);
    stats.policy_s += static_cast<double>(acted - start) * 1e-9;
    stats.env_s += static_cast<double>(monotonic_ns() - acted) * 1e-9;
    const auto& done_returns = env_.episode_returns();
    const auto& done_lengths = env_.episode_lengths();
    for (std::size_t i = 0; i < e; ++i) {
      if (!env_.done(static_cast<int>(i))) continue;
      std::memcpy(slot.final_observations() + (t * e + i) * o, env_.final_observations().data() + i * o,
                  o * sizeof(float));
      slot.episode_returns()[stats.episodes] = static_cast<float>(done_returns[i]);
      slot.episode_lengths()[stats.episodes] = static_cast<std::uint32_t>(done_lengths[i]);
      ++stats.episodes;  // at most E per step: never past max_episodes = T x E
      stats.return_sum += done_returns[i];
      stats.length_sum += done_lengths[i];
    }
  }
  const std::uint64_t start = monotonic_ns();
  act(slot.observations() + steps * e * o, static_cast<std::int64_t>(steps), slot);  // V(bootstrap)
  stats.policy_s += static_cast<double>(monotonic_ns() - start) * 1e-9;
  slot.header().episodes = stats.episodes;
  return stats;
}

void Rollout::act(const float* obs, std::int64_t t, const shm::SlotView& slot) {
  const std::int64_t e = d_.envs, p = d_.logits_dim;
  // from_blob over the slot's own row: the model only reads it.
  torch::Tensor x = torch::from_blob(const_cast<float*>(obs), rl_model_input_shape(e, model_.spec()),
                                     torch::TensorOptions().dtype(torch::kFloat32));
  if (device_.is_cuda()) x = x.to(device_);
  std::vector<torch::Tensor> heads = model_.forward_heads(x);
  if (device_.is_cuda()) {
    // One copy back of both heads; the actions are drawn on the CPU from the same generator, so a GPU
    // policy samples as the CPU one does from the same params.
    const torch::Tensor both =
        torch::cat({heads.at(1).reshape({e, 1}), heads.at(0).reshape({e, p})}, 1).to(torch::kFloat32).cpu();
    heads = {both.narrow(1, 1, p), both.select(1, 0)};
  }
  copy_floats(slot.values() + t * e, heads.at(1).reshape({e}), e);
  if (t == static_cast<std::int64_t>(d_.steps)) return;  // the bootstrap row has a value, no action
  const torch::Tensor params = heads[0].reshape({e, p}).to(torch::kFloat32);
  copy_floats(slot.logits() + t * e * p, params, e * p);
  const ActionSample a = head_.sample(params, generator_);
  copy_floats(slot.log_probs() + t * e, a.log_probs, e);
  if (head_.is_continuous()) {
    const std::int64_t n = e * head_.action_dim();
    copy_floats(slot.continuous_actions() + t * n, a.actions, n);
    std::memcpy(continuous_.data(), slot.continuous_actions() + t * n, static_cast<std::size_t>(n) * sizeof(float));
  } else {
    const torch::Tensor actions = a.actions.to(torch::kInt64).contiguous();
    std::memcpy(slot.discrete_actions() + t * e, actions.data_ptr<std::int64_t>(),
                static_cast<std::size_t>(e) * sizeof(std::int64_t));
    for (std::int64_t i = 0; i < e; ++i)
      discrete_[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(slot.discrete_actions()[t * e + i]);
  }
}

void Rollout::step_env(std::int64_t t, const shm::SlotView& slot) {
  const bool ok = head_.is_continuous() ? env_.step(std::span<const float>(continuous_))
                                        : env_.step(std::span<const std::int32_t>(discrete_));
  if (!ok)
    fail("env '{}' refused the policy's actions: the model's head does not fit its action space", env_.spec().name);
  const std::size_t e = d_.envs, o = d_.obs_dim;
  const std::size_t row = static_cast<std::size_t>(t) * e;
  std::memcpy(slot.rewards() + row, env_.rewards().data(), e * sizeof(float));
  std::memcpy(slot.terminated() + row, env_.terminated().data(), e);
  std::memcpy(slot.truncated() + row, env_.truncated().data(), e);
  std::memcpy(slot.observations() + (row + e) * o, env_.observations().data(), e * o * sizeof(float));
}

}  // namespace tandem::actor
