#include "learner/rl/returns.hpp"

#include <torch/types.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <tuple>
#include <utility>

namespace tandem::rl {
namespace {

// The inputs as contiguous float64 / uint8 CPU tensors for the loops, their shapes checked.
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

// Throws for shapes that do not fit (the caller's bug, not a user's input); returns {T, N}.
std::pair<std::int64_t, std::int64_t> columns_shape_check(const EpisodeSteps& s) {
  if (s.rewards.dim() != 2) throw std::invalid_argument("rl returns: rewards must be [T, N]");
  const std::int64_t T = s.rewards.size(0), N = s.rewards.size(1);
  const std::vector<std::int64_t> tn{T, N}, t1n{T + 1, N};
  if (s.values.sizes() != torch::IntArrayRef(t1n) || s.final_values.sizes() != torch::IntArrayRef(tn) ||
      s.terminated.sizes() != torch::IntArrayRef(tn) || s.truncated.sizes() != torch::IntArrayRef(tn))
    throw std::invalid_argument("rl returns: values must be [T + 1, N], the rest [T, N]");
  return {T, N};
}

Columns columns(const EpisodeSteps& s) {
  Columns c;
  std::tie(c.T, c.N) = columns_shape_check(s);
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

// The tensor-op forms' inputs, float64 (flags bool) on the inputs' device, and what every step
// bootstraps from: 0 after a termination, the final value after a truncation alone, else V(x_{t+1}).
struct OnDevice {
  std::int64_t T = 0;
  torch::Tensor rewards, values, ended, next;
};

OnDevice on_device(const EpisodeSteps& s) {
  (void)columns_shape_check(s);
  OnDevice d;
  d.T = s.rewards.size(0);
  d.rewards = s.rewards.detach().to(torch::kFloat64);
  d.values = s.values.detach().to(torch::kFloat64);
  const torch::Tensor terminated = s.terminated.to(torch::kBool), truncated = s.truncated.to(torch::kBool);
  d.ended = terminated | truncated;
  const torch::Tensor zero = torch::zeros({}, d.values.options());
  d.next = torch::where(
      terminated, zero,
      torch::where(truncated, s.final_values.detach().to(torch::kFloat64), d.values.narrow(0, 1, d.T)));
  return d;
}

// out[T - 1] = delta[T - 1]; out[t] = delta[t] + coef[t] * out[t + 1]: one kernel a step.
torch::Tensor reverse_scan(const torch::Tensor& delta, const torch::Tensor& coef) {
  torch::Tensor out = torch::empty_like(delta);
  const std::int64_t T = delta.size(0);
  if (T == 0) return out;
  out[T - 1].copy_(delta[T - 1]);
  for (std::int64_t t = T - 2; t >= 0; --t) {
    torch::Tensor row = out[t];
    at::addcmul_out(row, delta[t], coef[t], out[t + 1]);
  }
  return out;
}

}  // namespace

GaeResult gae_by_columns(const EpisodeSteps& steps, double gamma, double lambda) {
  const OnDevice d = on_device(steps);
  const torch::Tensor v = d.values.narrow(0, 0, d.T);
  const torch::Tensor delta = d.rewards + gamma * d.next - v;
  const torch::Tensor coef = torch::where(d.ended, torch::zeros_like(v), torch::full_like(v, gamma * lambda));
  const torch::Tensor adv = reverse_scan(delta, coef);
  const auto dtype = steps.rewards.scalar_type();
  return {adv.to(dtype), (adv + v).to(dtype)};
}

VtraceResult vtrace_by_columns(const EpisodeSteps& steps, const torch::Tensor& log_rhos, double gamma, double rho_bar,
                               double c_bar) {
  if (log_rhos.sizes() != steps.rewards.sizes()) throw std::invalid_argument("rl returns: log_rhos must be [T, N]");
  const OnDevice d = on_device(steps);
  const torch::Tensor v = d.values.narrow(0, 0, d.T);
  const torch::Tensor ratio = log_rhos.detach().to(torch::kFloat64).exp();
  const torch::Tensor rho = ratio.clamp_max(rho_bar);
  const torch::Tensor vs_minus_v = reverse_scan(
      rho * (d.rewards + gamma * d.next - v),
      torch::where(d.ended, torch::zeros_like(ratio), gamma * ratio.clamp_max(c_bar)));
  // v_{t+1}, the next state's target: its own inside the episode, the bootstrap itself after an end.
  if (d.T == 0) return {vs_minus_v, vs_minus_v};
  const torch::Tensor after = torch::cat({vs_minus_v.narrow(0, 1, d.T - 1), torch::zeros_like(v.narrow(0, 0, 1))});
  const torch::Tensor vs_next = torch::where(d.ended, d.next, d.next + after);
  const auto dtype = steps.rewards.scalar_type();
  return {(v + vs_minus_v).to(dtype), (rho * (d.rewards + gamma * vs_next - v)).to(dtype)};
}

GaeResult gae(const EpisodeSteps& steps, double gamma, double lambda) {
  if (steps.rewards.is_cuda()) return gae_by_columns(steps, gamma, lambda);
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
  if (steps.rewards.is_cuda()) return vtrace_by_columns(steps, log_rhos, gamma, rho_bar, c_bar);
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
