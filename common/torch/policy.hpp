// The action distribution of an actor-critic policy: what rollout actors sample from and what the RL
// learner scores, so that both read the policy head's output the same way.
//
//   PolicyHead head = PolicyHead::discrete(2);           // CartPole: 2 actions
//   auto [logits, value] = heads(model.forward_heads(obs));
//   ActionSample a = head.sample(logits, generator);       // actions [B] i64, log_probs [B]
//   torch::Tensor lp = head.log_prob(logits, a.actions);   // the learner, on the same parameters
//
// The policy head's output ("params", [B, params_dim()]) is
//   discrete:   the logits of a categorical over action_dim actions (params_dim = action_dim);
//   continuous: a diagonal Gaussian, the means then the log standard deviations of action_dim
//               dimensions (params_dim = 2 * action_dim); log_std is clamped to [kMinLogStd,
//               kMaxLogStd] so that an untrained head cannot produce an infinite density.
// Actions are int64 [B] (discrete) or float [B, action_dim] (continuous, unbounded: the env clips).
// These are what the experience ring stores as "logits" (the behaviour distribution's parameters),
// so V-trace recomputes behaviour log-probabilities exactly.
//
// Threads: stateless; any thread. sample() draws from the generator given (deterministic mode passes
// a seeded one), else from LibTorch's default generator.
#pragma once

#include <ATen/core/Generator.h>
#include <torch/types.h>

#include <cstdint>
#include <optional>

namespace tandem {

inline constexpr double kMinLogStd = -5.0;
inline constexpr double kMaxLogStd = 2.0;

struct ActionSample {
  torch::Tensor actions;    // i64 [B] or f32 [B, action_dim]
  torch::Tensor log_probs;  // f32 [B]
};

class PolicyHead {
 public:
  static PolicyHead discrete(std::int64_t actions) { return {false, actions}; }
  static PolicyHead continuous(std::int64_t dims) { return {true, dims}; }

  bool is_continuous() const { return continuous_; }
  std::int64_t action_dim() const { return action_dim_; }
  std::int64_t params_dim() const { return continuous_ ? 2 * action_dim_ : action_dim_; }

  ActionSample sample(const torch::Tensor& params, const std::optional<at::Generator>& generator = {}) const;
  torch::Tensor greedy(const torch::Tensor& params) const;                                  // argmax, or the mean
  torch::Tensor log_prob(const torch::Tensor& params, const torch::Tensor& actions) const;  // [B]
  torch::Tensor entropy(const torch::Tensor& params) const;                                 // [B]

 private:
  PolicyHead(bool continuous, std::int64_t action_dim) : continuous_(continuous), action_dim_(action_dim) {}
  bool continuous_;
  std::int64_t action_dim_;
};

}  // namespace tandem
