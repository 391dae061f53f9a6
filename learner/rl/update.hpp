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
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/torch/models.hpp"
#include "common/torch/policy.hpp"
#include "learner/optim.hpp"
#include "learner/graph_capture.hpp"
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
};

// One minibatch's 0-dim losses.
struct Losses {
  torch::Tensor total, policy, value, entropy;
};

// One PPO minibatch: mb rows of the batch, shuffled.
struct PpoMinibatch {
  torch::Tensor observations;  // f32 [mb, obs_dim]
  torch::Tensor actions;       // i64 [mb] or f32 [mb, action_dim]
  torch::Tensor log_probs;     // f32 [mb], behaviour
  torch::Tensor advantages;    // f32 [mb]
  torch::Tensor returns;       // f32 [mb]
  torch::Tensor values;        // f32 [mb], before the update
};

class RlUpdater {
 public:
  // algo: ppo or vtrace; generator: the minibatch order (seeded, so a run is reproducible).
  RlUpdater(Model& model, PolicyHead head, Optimizer& optimizer, Algo algo, const RlSettings& settings,
            at::Generator generator);

  UpdateStats update(const Batch& batch, double lr);

  // learner.cuda_graph: from now on every minibatch step (forward, the targets, losses, backward,
  // clipping, the optimizer's update) is one CUDA graph replay (learner/graph_capture.hpp) after three
  // eager warm-up steps, the minibatch copied into the graph's fixed inputs first. PPO's targets are
  // the update's (GAE, outside the graph); V-trace's are each minibatch's own, inside it (on the
  // device: returns.hpp), its final observations all valued and masked where they do not
  // bootstrap. Returns why it cannot be (a TorchScript or CPU model, learner ranks' gradient sync),
  // and then stays eager.
  // A capture that fails logs one line and the update goes on eagerly. Call before the first update.
  std::optional<std::string> capture_minibatches();
  bool minibatches_captured() const;  // a graph exists and replays
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
  Losses ppo_losses(const PpoMinibatch& m);
  // How V-trace values the final observations: those that bootstrap selected (eager), or all of them
  // valued and the rest masked to 0 (the captured step: no shape depends on the data).
  enum class FinalValues { selected, masked };
  Losses vtrace_losses(const Batch& sub, FinalValues final_values_how);  // sub: a minibatch of columns
  void step(const Losses& losses, double lr);  // eager: backward, clip, the optimizer, the sums
  // Copies `inputs` into the graph's fixed tensors (made like the first call's) and replays the
  // captured step whose losses `losses_of` computes from them; false: run this minibatch eagerly.
  bool replay(const std::vector<torch::Tensor>& inputs, double lr,
              const std::function<Losses(const std::vector<torch::Tensor>&)>& losses_of);
  void add_to_sums(const Losses& losses);
  UpdateStats read_sums(int minibatches);

  Model& model_;
  PolicyHead head_;
  Optimizer& optimizer_;
  Algo algo_;
  RlSettings s_;
  at::Generator generator_;
  std::function<void()> after_backward_, before_step_;
  torch::Tensor sums_;  // f32 [4] on the model's device: the update's loss sums, read once at its end
  // learner.cuda_graph: the captured minibatch step and its fixed inputs (capture_minibatches()).
  bool capture_ = false;
  std::unique_ptr<GraphCapture> graph_;
  std::vector<torch::Tensor> fixed_;
  torch::Tensor one_;  // d loss / d loss, made in the first warm-up step rather than inside the graph
};

}  // namespace tandem::rl
