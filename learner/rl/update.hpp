// One RL update from the slots the gatherer holds: the batch as tensors over the slots (make_batch),
// then PPO (clipped surrogate, clipped value loss, entropy bonus, update_epochs x minibatches) or
// V-trace (IMPALA's actor-critic loss on V-trace targets), each minibatch one Adam step with the
// gradient norm clipped.
//
// Values: the learner's own value head, before the update, values every observation of the batch
// (and the final observations of truncated episodes): GAE, the V-trace targets and PPO's value
// clipping all start from them. Behaviour log-probabilities come from the slots.
//
// Threads: the learner's main thread; the model and optimizer are used by no one else meanwhile.
#pragma once

#include <ATen/core/Generator.h>
#include <torch/types.h>

#include <functional>
#include <vector>

#include "common/torch/models.hpp"
#include "common/torch/policy.hpp"
#include "learner/optim.hpp"
#include "learner/rl/rl_setup.hpp"
#include "learner/rl/slot_gather.hpp"

namespace tandem::rl {

// T steps of N = slots x E columns, on the learner's device. Built from views into the held slots
// (torch::from_blob): copied once, straight into these tensors (host-registered on a GPU: async H2D).
struct Batch {
  torch::Tensor observations;        // f32 [T + 1, N, obs_dim]
  torch::Tensor final_observations;  // f32 [T, N, obs_dim]
  torch::Tensor actions;             // i64 [T, N] or f32 [T, N, action_dim]
  torch::Tensor rewards;             // f32 [T, N]
  torch::Tensor terminated;          // u8 [T, N]
  torch::Tensor truncated;           // u8 [T, N]
  torch::Tensor log_probs;           // f32 [T, N], behaviour
  std::int64_t steps() const { return rewards.size(0); }
  std::int64_t columns() const { return rewards.size(1); }
};

Batch make_batch(const std::vector<HeldSlot>& slots, const shm::ExperienceDescriptor& d, const torch::Device& device);

struct UpdateStats {
  double loss = 0, policy_loss = 0, value_loss = 0, entropy = 0;  // means over the minibatches
  int minibatches = 0;

  // One minibatch's 0-dim losses (each .item() is a device sync on a GPU).
  void add(const torch::Tensor& total, const torch::Tensor& policy, const torch::Tensor& value,
           const torch::Tensor& ent) {
    loss += total.item<double>(), policy_loss += policy.item<double>(), value_loss += value.item<double>();
    entropy += ent.item<double>();
    ++minibatches;
  }
  UpdateStats means() const {
    const double n = minibatches > 0 ? minibatches : 1;
    return {loss / n, policy_loss / n, value_loss / n, entropy / n, minibatches};
  }
};

class RlUpdater {
 public:
  // algo: ppo or vtrace; generator: the minibatch order (seeded, so a run is reproducible).
  RlUpdater(Model& model, PolicyHead head, Optimizer& optimizer, Algo algo, const RlSettings& settings,
            at::Generator generator);

  UpdateStats update(const Batch& batch, double lr);
  // Runs after every backward, before the gradients are clipped (learner ranks: GradSync::finish, so
  // the norm is the averaged gradients', the same on every rank).
  void set_after_backward(std::function<void()> fn) { after_backward_ = std::move(fn); }
  // Runs before every optimizer step (the publisher's fence: LearnerRuntime::wait_before_update).
  void set_before_step(std::function<void()> fn) { before_step_ = std::move(fn); }

 private:
  struct Heads {
    torch::Tensor params, value;  // [..., params_dim], [...]
  };
  Heads heads(const torch::Tensor& obs);  // obs [..., obs_dim]
  // V of every observation, and of the final observation where a step was truncated, not terminated.
  std::pair<torch::Tensor, torch::Tensor> values_of(const Batch& b);
  UpdateStats ppo(const Batch& b, double lr);
  UpdateStats vtrace(const Batch& b, double lr);
  void step(const torch::Tensor& loss, double lr);

  Model& model_;
  PolicyHead head_;
  Optimizer& optimizer_;
  Algo algo_;
  RlSettings s_;
  at::Generator generator_;
  std::function<void()> after_backward_, before_step_;
};

}  // namespace tandem::rl
