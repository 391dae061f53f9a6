#include "learner/rl/normalizers.hpp"

#include <torch/utils.h>

#include <algorithm>
#include <cmath>

namespace tandem::rl {

void update_obs_stats(const ObsStats& stats, const torch::Tensor& observations) {
  torch::NoGradGuard no_grad;
  const torch::Tensor x = observations.reshape({-1, observations.size(-1)}).to(torch::kFloat64);
  const double batch_count = static_cast<double>(x.size(0));
  if (batch_count == 0) return;
  torch::Tensor mean = stats.mean.to(torch::kFloat64), var = stats.var.to(torch::kFloat64);
  double count = stats.count.item<double>();
  merge_moments(mean, var, count, x.mean(0), x.var(0, /*unbiased=*/false), batch_count);
  stats.mean.copy_(mean);
  stats.var.copy_(var);
  stats.count.fill_(count);
}

RewardScaler::RewardScaler(std::uint32_t actors, std::int64_t envs, double gamma)
    : envs_(envs),
      gamma_(gamma),
      returns_(torch::zeros({static_cast<std::int64_t>(actors), envs}, torch::kFloat64)),
      moments_(torch::tensor({0.0, 1.0, kStartCount}, torch::kFloat64)) {}

void RewardScaler::scale(std::uint32_t actor, std::int64_t steps, const float* rewards, const std::uint8_t* terminated,
                         const std::uint8_t* truncated, float* out) {
  double* g = returns_.data_ptr<double>() + static_cast<std::int64_t>(actor) * envs_;
  double* m = moments_.data_ptr<double>();
  const double E = static_cast<double>(envs_);
  for (std::int64_t t = 0; t < steps; ++t) {
    const std::int64_t row = t * envs_;
    double sum = 0;
    for (std::int64_t e = 0; e < envs_; ++e) {
      g[e] = gamma_ * g[e] + rewards[row + e];
      sum += g[e];
    }
    const double mean = sum / E;
    double sq = 0;
    for (std::int64_t e = 0; e < envs_; ++e) sq += (g[e] - mean) * (g[e] - mean);
    merge_moments(m[0], m[1], m[2], mean, sq / E, E);
    const double inv_std = 1.0 / std::sqrt(m[1] + kNormEpsilon);
    for (std::int64_t e = 0; e < envs_; ++e) {
      out[row + e] = static_cast<float>(std::clamp(rewards[row + e] * inv_std, -kNormClip, kNormClip));
      if (terminated[row + e] || truncated[row + e]) g[e] = 0;
    }
  }
}

void RewardScaler::restart(std::uint32_t actor) { returns_[static_cast<std::int64_t>(actor)].zero_(); }

torch::Tensor RewardScaler::scale(const std::vector<HeldSlot>& slots, std::int64_t steps) {
  const std::int64_t n = static_cast<std::int64_t>(slots.size());
  // Slot-major while scaling (each slot's block contiguous), then laid out as make_batch's columns.
  torch::Tensor blocks = torch::empty({n, steps, envs_}, torch::kFloat32);
  for (std::int64_t i = 0; i < n; ++i) {
    const HeldSlot& h = slots[static_cast<std::size_t>(i)];
    if (h.view.header().writer_start) restart(h.actor);
    scale(h.actor, steps, h.view.rewards(), h.view.terminated(), h.view.truncated(), blocks[i].data_ptr<float>());
  }
  return blocks.permute({1, 0, 2}).reshape({steps, n * envs_});
}

NamedTensors RewardScaler::state() const { return {{"reward_returns", returns_}, {"reward_moments", moments_}}; }

namespace {
constexpr double kReturnEpsilon = 1e-5;  // Sample Factory's RunningMeanStd
constexpr double kReturnClip = 5.0;
}  // namespace

ReturnNormalizer::ReturnNormalizer(const torch::Device& device)
    : moments_(torch::tensor({0.0, 1.0, kStartCount}, torch::kFloat64).to(device)) {}

void ReturnNormalizer::update(const torch::Tensor& targets) {
  torch::NoGradGuard no_grad;
  const torch::Tensor x = targets.reshape({-1}).to(torch::kFloat64);
  const double n = static_cast<double>(x.numel());
  if (n == 0) return;
  // merge_moments with the count a tensor too: nothing here waits for the device.
  const torch::Tensor mean = moments_[0], var = moments_[1], count = moments_[2];
  const torch::Tensor total = count + n, delta = x.mean() - mean;
  const torch::Tensor m2 = var * count + x.var(/*unbiased=*/false) * n + delta * delta * count * (n / total);
  moments_.copy_(torch::stack({mean + delta * (n / total), m2 / total, total}));
}

torch::Tensor ReturnNormalizer::normalize(const torch::Tensor& x) const {
  const torch::Tensor m = moments_.to(x.scalar_type());
  return ((x - m[0]) * (m[1] + kReturnEpsilon).rsqrt()).clamp(-kReturnClip, kReturnClip);
}

torch::Tensor ReturnNormalizer::denormalize(const torch::Tensor& normalized) const {
  const torch::Tensor m = moments_.to(normalized.scalar_type());
  return normalized * (m[1] + kReturnEpsilon).sqrt() + m[0];
}

torch::Tensor ReturnNormalizer::stddev() const { return (moments_[1] + kReturnEpsilon).sqrt(); }

NamedTensors ReturnNormalizer::state() const { return {{"return_moments", moments_}}; }

}  // namespace tandem::rl
