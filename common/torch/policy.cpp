#include "common/torch/policy.hpp"

#include <torch/types.h>
#include <torch/utils.h>

#include <cmath>

namespace tandem {
namespace {

// LibTorch 1.13 takes c10::optional (its own type); 2.x made it std::optional.
c10::optional<at::Generator> to_c10(const std::optional<at::Generator>& g) {
  if (g) return *g;
  return c10::nullopt;
}

const double kHalfLog2Pi = 0.5 * std::log(2.0 * M_PI);

struct Gaussian {
  torch::Tensor mean, log_std;
};

Gaussian gaussian(const torch::Tensor& params, std::int64_t dims) {
  auto parts = params.split(dims, -1);
  return {parts[0], parts[1].clamp(kMinLogStd, kMaxLogStd)};
}

}  // namespace

ActionSample PolicyHead::sample(const torch::Tensor& params, const std::optional<at::Generator>& generator) const {
  torch::NoGradGuard no_grad;
  torch::Tensor actions;
  if (continuous_) {
    const Gaussian g = gaussian(params, action_dim_);
    actions = g.mean + g.log_std.exp() * at::randn(g.mean.sizes(), to_c10(generator), g.mean.options());
  } else {
    actions = at::multinomial(torch::softmax(params, -1), 1, true, to_c10(generator)).squeeze(1);
  }
  return {actions, log_prob(params, actions)};
}

torch::Tensor PolicyHead::greedy(const torch::Tensor& params) const {
  torch::NoGradGuard no_grad;
  return continuous_ ? gaussian(params, action_dim_).mean : params.argmax(-1);
}

torch::Tensor PolicyHead::log_prob(const torch::Tensor& params, const torch::Tensor& actions) const {
  if (continuous_) {
    const Gaussian g = gaussian(params, action_dim_);
    const torch::Tensor z = (actions - g.mean) * (-g.log_std).exp();
    return (-0.5 * z * z - g.log_std - kHalfLog2Pi).sum(-1);
  }
  return torch::log_softmax(params, -1).gather(-1, actions.unsqueeze(-1)).squeeze(-1);
}

torch::Tensor PolicyHead::entropy(const torch::Tensor& params) const {
  if (continuous_) return (gaussian(params, action_dim_).log_std + 0.5 + kHalfLog2Pi).sum(-1);
  const torch::Tensor log_p = torch::log_softmax(params, -1);
  return -(log_p.exp() * log_p).sum(-1);
}

}  // namespace tandem
