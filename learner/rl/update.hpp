// One RL update from the slots the gatherer holds: the batch as tensors over the slots (make_batch),
// then PPO (clipped surrogate, clipped value loss, entropy bonus, a KL penalty, update_epochs x
// minibatches; targets from GAE or V-trace) or V-trace (IMPALA's actor-critic loss on V-trace
// targets), each minibatch one Adam step with the gradient norm clipped.
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
#include "learner/rl/normalizers.hpp"
#include "learner/rl/rl_setup.hpp"
#include "learner/rl/slot_gather.hpp"
#include "shm/control_block_format.hpp"

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
  std::vector<torch::Tensor> tensors() const;  // in the order above
  static Batch of(const std::vector<torch::Tensor>& t);
};

Batch make_batch(const std::vector<HeldSlot>& slots, const shm::ExperienceDescriptor& d, const torch::Device& device);

// What an update did. PPO measures it once, after its last step, over the whole batch: the losses of
// the weights it ended with, and how far they moved from the behaviour policy (a mean over its
// minibatches would cost a dozen launches in each of them, most of a small model's step). V-trace's
// are means over its minibatches, each measured before its step. approx_kl: of (r - 1) - log r, r the
// ratio of the current to the behaviour probability (CleanRL's approx_kl); clip_frac: share of
// samples with |r - 1| > rl.clip_coef (PPO; NaN for V-trace); explained_var: 1 - Var(targets -
// values) / Var(targets); adv_std: the advantages' std before normalisation.
struct UpdateStats {
  double loss = 0, policy_loss = 0, value_loss = 0, entropy = 0;
  double approx_kl = 0, clip_frac = 0, explained_var = 0, adv_std = 0;
  double return_std = shm::kNaN;  // rl.norm_value: the std the value targets are divided by
  int minibatches = 0;
};

// rl.kl_target's rule (rl_games' adaptive schedule), once per update: the learning-rate factor after
// an update whose mean KL was `kl`: / 1.5 above 2 x target, x 1.5 below target / 2, within [0.01, 10].
double follow_kl(double lr_scale, double kl, double target);

// 0-dim losses and diagnostics, UpdateStats's in its order: a V-trace minibatch's, or PPO's update's.
struct Losses {
  torch::Tensor total, policy, value, entropy, approx_kl, clip_frac, explained_var, adv_std;
};

// PPO's samples, flattened: the whole batch, or one minibatch of it.
struct PpoSamples {
  torch::Tensor observations;  // f32 [n, obs_dim]
  torch::Tensor actions;       // i64 [n] or f32 [n, action_dim]
  torch::Tensor log_probs;     // f32 [n], behaviour
  torch::Tensor advantages;    // f32 [n]
  torch::Tensor returns;       // f32 [n], normalised with rl.norm_value
  torch::Tensor values;        // f32 [n], the value head's before the update (normalised with rl.norm_value)
  std::vector<torch::Tensor> tensors() const;
  static PpoSamples of(const std::vector<torch::Tensor>& t);
};

class RlUpdater {
 public:
  // algo: ppo or vtrace; generator: the minibatch order on the CPU (seeded, so a run is reproducible;
  // on a GPU its seed seeds the GPUs' default generators, from which the order is drawn there). returns:
  // rl.norm_value's normaliser (the caller keeps it, for checkpoints), else nullptr.
  RlUpdater(Model& model, PolicyHead head, Optimizer& optimizer, Algo algo, const RlSettings& settings,
            at::Generator generator, ReturnNormalizer* returns = nullptr);

  UpdateStats update(const Batch& batch, double lr);

  // learner.cuda_graph: from now on the whole update (every epoch and minibatch: the order drawn on
  // the device, forward, losses, backward, clipping, the optimizer) is one CUDA graph replay
  // (learner/graph_capture.hpp) after three eager warm-up updates, the batch copied into the graph's
  // fixed inputs first. PPO's targets are the update's (GAE or V-trace, outside the graph);
  // V-trace's are each minibatch's own, inside it (on the device: returns.hpp), its final
  // observations all valued and masked where they do not bootstrap. Returns why it cannot be (a
  // TorchScript or CPU model, learner ranks' gradient sync), and then stays eager.
  // A capture that fails logs one line and the update goes on eagerly. Call before the first update.
  std::optional<std::string> capture_updates();
  bool updates_captured() const;  // a graph exists and replays
  // Runs after every backward, before the gradients are clipped (learner ranks: GradSync::finish, so
  // the norm is the averaged gradients', the same on every rank).
  void set_after_backward(std::function<void()> fn) { after_backward_ = std::move(fn); }
  // Runs before the update's first optimizer step (the publisher's fence: LearnerRuntime::wait_before_update).
  void set_before_step(std::function<void()> fn) { before_step_ = std::move(fn); }

 private:
  struct Heads {
    torch::Tensor params, value;  // [..., params_dim], [...]
  };
  // Takes one minibatch's loss to an optimizer step (eager, or the k-th of the captured update).
  using Step = std::function<void(const torch::Tensor& loss)>;
  struct PpoTerms {
    torch::Tensor log_ratio, ratio, policy, value;  // per sample, per sample, 0-dim, 0-dim
  };

  Heads heads(const torch::Tensor& obs);  // obs [..., obs_dim]
  torch::Tensor permutation(std::int64_t n, const torch::Device& device);
  PpoSamples ppo_samples(const Batch& b);  // the targets, from the weights before the update
  void ppo_epochs(const PpoSamples& all, const Step& step);
  void vtrace_epochs(const Batch& b, const Step& step, bool captured);
  PpoTerms ppo_terms(const Heads& h, const PpoSamples& m, const torch::Tensor& advantages) const;
  torch::Tensor ppo_loss(const PpoSamples& m);  // a minibatch's, its advantages normalised already
  Losses ppo_measure(const PpoSamples& all);    // the update's UpdateStats, after its last step
  // How V-trace values the final observations: those that bootstrap selected (eager), or all of them
  // valued and the rest masked to 0 (the captured step: no shape depends on the data).
  enum class FinalValues { selected, masked };
  Losses vtrace_losses(const Batch& sub, FinalValues final_values_how);  // sub: a minibatch of columns
  // Runs `epochs` over `inputs`: eagerly, or copied into the graph's fixed tensors and replayed
  // (capture_updates()); a refused capture runs this update eagerly, and every later one.
  void run_epochs(const std::vector<torch::Tensor>& inputs, double lr,
                  const std::function<void(const std::vector<torch::Tensor>&, const Step&, bool captured)>& epochs);
  void eager_step(const torch::Tensor& loss, double lr);  // backward, the hooks, clip, the optimizer
  void add_to_stats(const Losses& losses, double weight);
  UpdateStats read_stats();
  std::int64_t steps_per_update() const { return s_.update_epochs * s_.minibatches; }

  Model& model_;
  PolicyHead head_;
  Optimizer& optimizer_;
  Algo algo_;
  RlSettings s_;
  at::Generator generator_;
  ReturnNormalizer* returns_;
  std::function<void()> after_backward_, before_step_;
  torch::Tensor stats_;  // f32 [8] on the model's device: the update's Losses, read once at its end
  // learner.cuda_graph: the captured update and its fixed inputs (capture_updates()).
  bool capture_ = false;
  std::unique_ptr<GraphCapture> graph_;
  std::vector<torch::Tensor> fixed_;
  torch::Tensor one_;  // d loss / d loss, made in the first warm-up step rather than inside the graph
};

}  // namespace tandem::rl
