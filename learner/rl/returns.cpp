#include "learner/rl/returns.hpp"

#include <torch/types.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>

namespace tandem::rl {
namespace {

// The inputs as contiguous float64 / uint8 CPU tensors, their shapes checked (a mismatch is the
// caller's bug, not a user's input).
struct Columns {
  std::int64_t T = 0, N = 0;
  torch::Tensor rewards, values, final_values, terminated, truncated;
  const double* r() const { return rewards.data_ptr<double>(); }
  const double* v() const { return values.data_ptr<double>(); }
  const double* fv() const { return final_values.data_ptr<double>(); }
  const std::uint8_t* term() const { return terminated.data_ptr<std::uint8_t>(); }
  const std::uint8_t* trunc() const { return truncated.data_ptr<std::uint8_t>(); }
};

torch::Tensor as_f64(const torch::Tensor& t) { return t.detach().to(torch::kCPU, torch::kFloat64).contiguous(); }
torch::Tensor as_u8(const torch::Tensor& t) { return t.detach().to(torch::kCPU, torch::kUInt8).contiguous(); }

Columns columns(const EpisodeSteps& s) {
  Columns c;
  if (s.rewards.dim() != 2) throw std::invalid_argument("rl returns: rewards must be [T, N]");
  c.T = s.rewards.size(0);
  c.N = s.rewards.size(1);
  const std::vector<std::int64_t> tn{c.T, c.N}, t1n{c.T + 1, c.N};
  if (s.values.sizes() != torch::IntArrayRef(t1n) || s.final_values.sizes() != torch::IntArrayRef(tn) ||
      s.terminated.sizes() != torch::IntArrayRef(tn) || s.truncated.sizes() != torch::IntArrayRef(tn))
    throw std::invalid_argument("rl returns: values must be [T + 1, N], the rest [T, N]");
  c.rewards = as_f64(s.rewards);
  c.values = as_f64(s.values);
  c.final_values = as_f64(s.final_values);
  c.terminated = as_u8(s.terminated);
  c.truncated = as_u8(s.truncated);
  return c;
}

// What step i = t * N + n bootstraps from, and whether the episode ended there.
struct Next {
  double value;
  bool ended;
};
Next next_of(const Columns& c, std::int64_t t, std::int64_t n) {
  const std::int64_t i = t * c.N + n;
  if (c.term()[i]) return {0.0, true};
  if (c.trunc()[i]) return {c.fv()[i], true};
  return {c.v()[i + c.N], false};
}

}  // namespace

GaeResult gae(const EpisodeSteps& steps, double gamma, double lambda) {
  const Columns c = columns(steps);
  torch::Tensor adv = torch::empty({c.T, c.N}, torch::kFloat64);
  double* a = adv.data_ptr<double>();
  for (std::int64_t n = 0; n < c.N; ++n) {
    double after = 0.0;  // A_{t+1}
    for (std::int64_t t = c.T - 1; t >= 0; --t) {
      const std::int64_t i = t * c.N + n;
      const Next next = next_of(c, t, n);
      const double delta = c.r()[i] + gamma * next.value - c.v()[i];
      after = delta + (next.ended ? 0.0 : gamma * lambda * after);
      a[i] = after;
    }
  }
  torch::Tensor ret = adv + c.values.narrow(0, 0, c.T);
  const auto dtype = steps.rewards.scalar_type();
  return {adv.to(dtype), ret.to(dtype)};
}

VtraceResult vtrace(const EpisodeSteps& steps, const torch::Tensor& log_rhos, double gamma, double rho_bar,
                    double c_bar) {
  const Columns c = columns(steps);
  if (log_rhos.sizes() != steps.rewards.sizes()) throw std::invalid_argument("rl returns: log_rhos must be [T, N]");
  const torch::Tensor lr = as_f64(log_rhos);
  const double* log_rho = lr.data_ptr<double>();
  torch::Tensor vs = torch::empty({c.T, c.N}, torch::kFloat64), pg = torch::empty({c.T, c.N}, torch::kFloat64);
  double* out_vs = vs.data_ptr<double>();
  double* out_pg = pg.data_ptr<double>();
  for (std::int64_t n = 0; n < c.N; ++n) {
    double vs_minus_v_after = 0.0;  // v_{t+1} - V(x_{t+1}) inside the episode; 0 past the slot's end
    for (std::int64_t t = c.T - 1; t >= 0; --t) {
      const std::int64_t i = t * c.N + n;
      const double ratio = std::exp(log_rho[i]);
      const double rho = std::min(rho_bar, ratio), cc = std::min(c_bar, ratio);
      const Next next = next_of(c, t, n);
      // The next state's target: its V-trace target inside the episode, else the bootstrap itself.
      const double vs_next = next.ended ? next.value : next.value + vs_minus_v_after;
      const double delta = rho * (c.r()[i] + gamma * next.value - c.v()[i]);
      const double carried = next.ended ? 0.0 : gamma * cc * vs_minus_v_after;
      vs_minus_v_after = delta + carried;
      out_vs[i] = c.v()[i] + vs_minus_v_after;
      out_pg[i] = rho * (c.r()[i] + gamma * vs_next - c.v()[i]);
    }
  }
  const auto dtype = steps.rewards.scalar_type();
  return {vs.to(dtype), pg.to(dtype)};
}

}  // namespace tandem::rl
