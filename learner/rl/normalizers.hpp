// The running statistics of the continuous-control recipe (CleanRL's ppo_continuous_action.py, which
// wraps each env in gymnasium's NormalizeObservation and NormalizeReward), kept by the RL learner over
// the batches it consumes rather than by wrappers inside the actors:
//
//  * rl.norm_obs: the observation mean and variance are buffers of the model (rl_model.hpp,
//    obs_stats_of()). update_obs_stats() folds in one update's raw observations; the learner calls it
//    after that update (so GAE's values and every epoch see the statistics the actors acted with, and
//    an on-policy batch starts at ratio 1) and after the publisher's copy of the previous version is
//    done, since the buffers live in the published bytes.
//  * rl.norm_reward: a RewardScaler divides each reward by the running std of its env's discounted
//    return. It needs each env's steps in time order: an actor's slots reach the learner oldest first
//    (slot_gather.hpp), so scaling the gathered slots in their order keeps each (actor, env)
//    accumulator's order. Its state goes into the RL checkpoint (state()).
//
//  * rl.norm_value: a ReturnNormalizer keeps the running mean and variance of the value targets
//    (Sample Factory's returns normaliser, after rl_games'): the value head learns the targets
//    normalised, and its outputs are de-normalised wherever a value stands for a return (GAE, V-trace).
//    It lives on the learner's device and is never read back to the host in an update.
//
// All three merge batches into the running moments with the parallel-variance rule (Chan et al.), as
// gymnasium's RunningMeanStd does, from its starting point mean 0, variance 1, count 1e-4.
//
// Threads: the learner's main thread.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <vector>

#include "common/torch/models.hpp"
#include "common/torch/rl_model.hpp"
#include "learner/rl/slot_gather.hpp"

namespace tandem::rl {

inline constexpr double kNormEpsilon = 1e-8;  // under the square root, as gymnasium's wrappers
inline constexpr double kNormClip = 10.0;     // CleanRL clips normalised observations and rewards to +-10
inline constexpr double kStartCount = 1e-4;   // gymnasium's RunningMeanStd starts from this count

// Folds a batch of mean `batch_mean`, population variance `batch_var` and `batch_count` samples into
// running moments (mean, var, count), in place. V is double or a torch::Tensor (per dimension).
template <class V>
void merge_moments(V& mean, V& var, double& count, const V& batch_mean, const V& batch_var, double batch_count) {
  const double total = count + batch_count;
  const V delta = batch_mean - mean;
  const V m2 = var * count + batch_var * batch_count + delta * delta * (count * batch_count / total);
  mean = mean + delta * (batch_count / total);
  var = m2 / total;
  count = total;
}

// Folds raw observations [..., obs_dim] into the model's statistics, in place.
void update_obs_stats(const ObsStats& stats, const torch::Tensor& observations);

class RewardScaler {
 public:
  RewardScaler(std::uint32_t actors, std::int64_t envs, double gamma);

  // One slot's rewards of `actor`'s envs, step-major [steps, envs], scaled into `out` (same layout):
  // each env's return G = gamma * G + r is folded into the running moments (all envs of a step
  // together), r is divided by sqrt(var + 1e-8) and clipped, and G restarts after an episode's end.
  void scale(std::uint32_t actor, std::int64_t steps, const float* rewards, const std::uint8_t* terminated,
             const std::uint8_t* truncated, float* out);
  // `actor`'s envs began new episodes (the actor process restarted): their returns restart at 0.
  void restart(std::uint32_t actor);
  // The rewards of an update's slots as make_batch lays them out: [T, slots x envs], float32, CPU. A
  // slot marked writer_start (the first of a restarted actor) restarts that actor's returns first.
  torch::Tensor scale(const std::vector<HeldSlot>& slots, std::int64_t steps);

  // The state a resume needs (the tensors themselves: a checkpoint load copies into them).
  NamedTensors state() const;
  double variance() const { return moments_[1].item<double>(); }

 private:
  std::int64_t envs_;
  double gamma_;
  torch::Tensor returns_;  // f64 [actors, envs]: each env's discounted return so far
  torch::Tensor moments_;  // f64 [3]: mean, var, count of the returns
};

class ReturnNormalizer {
 public:
  explicit ReturnNormalizer(const torch::Device& device);

  // Folds one update's value targets (any shape) into the moments, on the device.
  void update(const torch::Tensor& targets);
  // (x - mean) / sqrt(var + 1e-5), clipped to +-5 (Sample Factory's epsilon and clip); and back.
  torch::Tensor normalize(const torch::Tensor& x) const;
  torch::Tensor denormalize(const torch::Tensor& normalized) const;
  torch::Tensor stddev() const;  // 0-dim, float64, on the device

  NamedTensors state() const;  // for the RL checkpoint, as RewardScaler::state()

 private:
  torch::Tensor moments_;  // f64 [3] on the device: mean, var, count
};

}  // namespace tandem::rl
