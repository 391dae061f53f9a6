#include "learner/optim.hpp"

#include <torch/torch.h>
#include <torch/version.h>

#include <cmath>

#include "common/error.hpp"

namespace tandem {

void validate(const OptimizerConfig& c) {
  if (c.kind != "sgd" && c.kind != "adam" && c.kind != "adamw")
    fail("optimizer '{}' is not one of sgd, adam, adamw: fix the optimizer key", c.kind);
  if (!(c.lr > 0.0)) fail("learning rate {} must be positive: fix the lr key", c.lr);
  if (!(c.momentum >= 0.0 && c.momentum < 1.0)) fail("momentum {} must be in [0, 1): fix the momentum key", c.momentum);
  if (c.nesterov && c.kind == "sgd" && c.momentum == 0.0)
    fail("nesterov needs a momentum above 0: set momentum or turn nesterov off");
  if (!(c.weight_decay >= 0.0)) fail("weight decay {} must be >= 0: fix the weight_decay key", c.weight_decay);
  if (!(c.beta1 >= 0.0 && c.beta1 < 1.0) || !(c.beta2 >= 0.0 && c.beta2 < 1.0))
    fail("adam betas ({}, {}) must be in [0, 1): fix the beta1/beta2 keys", c.beta1, c.beta2);
  if (!(c.eps > 0.0)) fail("adam eps {} must be positive: fix the eps key", c.eps);
}

void validate(const ScheduleConfig& s) {
  if (s.kind != "constant" && s.kind != "step" && s.kind != "cosine")
    fail("lr schedule '{}' is not one of constant, step, cosine: fix the schedule key", s.kind);
  if (s.warmup_steps < 0) fail("warmup_steps {} must be >= 0", s.warmup_steps);
  if (s.kind == "cosine" && s.total_steps <= s.warmup_steps)
    fail("a cosine schedule needs total_steps ({}) above warmup_steps ({}): set the number of training steps",
         s.total_steps, s.warmup_steps);
  if (s.kind == "step" && (s.step_size < 1 || !(s.gamma > 0.0)))
    fail("a step schedule needs step_size >= 1 and gamma > 0 (got {}, {})", s.step_size, s.gamma);
  if (!(s.min_lr >= 0.0)) fail("min_lr {} must be >= 0", s.min_lr);
}

double scheduled_lr(const ScheduleConfig& s, double base_lr, std::int64_t step) {
  if (step < s.warmup_steps) return base_lr * static_cast<double>(step + 1) / static_cast<double>(s.warmup_steps);
  const std::int64_t after = step - s.warmup_steps;
  if (s.kind == "step") {
    const std::int64_t decays = after / s.step_size;  // whole steps, as torch.optim.lr_scheduler.StepLR counts
    return base_lr * std::pow(s.gamma, static_cast<double>(decays));
  }
  if (s.kind == "cosine") {
    const double span = static_cast<double>(s.total_steps - s.warmup_steps);
    const double progress = std::min(1.0, static_cast<double>(after) / span);
    return s.min_lr + (base_lr - s.min_lr) * 0.5 * (1.0 + std::cos(M_PI * progress));
  }
  return base_lr;
}

namespace {

// A 1-D tensor over `first`'s storage covering `tensors`, if they lie in it back to back, in order,
// contiguous, with one dtype and device; else undefined.
torch::Tensor tiling(const std::vector<torch::Tensor>& tensors) {
  if (tensors.empty()) return {};
  const torch::Tensor& first = tensors[0];
  std::int64_t next = first.storage_offset(), total = 0;
  for (const torch::Tensor& t : tensors) {
    if (!t.defined() || !t.is_contiguous() || !t.storage().is_alias_of(first.storage()) || t.storage_offset() != next ||
        t.scalar_type() != first.scalar_type() || t.device() != first.device())
      return {};
    next += t.numel();
    total += t.numel();
  }
  return torch::empty({0}, first.options()).set_(first.storage(), first.storage_offset(), {total}, {1});
}

}  // namespace

Optimizer::Optimizer(const std::vector<std::pair<std::string, torch::Tensor>>& params, OptimizerConfig config)
    : config_(std::move(config)) {
  validate(config_);
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> values;
  for (const auto& [name, value] : params)
    if (value.requires_grad()) {
      params_.push_back({name, value, {}, {}});
      values.push_back(value);
    }
  // SGD's buffer starts at zero: with dampening 0, momentum * 0 + g equals PyTorch's first-step copy.
  const bool has_buf1 = config_.kind != "sgd" || config_.momentum != 0.0, has_buf2 = config_.kind != "sgd";
  flat_.value = tiling(values);
  if (flat_.value.defined()) {
    if (has_buf1) flat_.buf1 = torch::zeros_like(flat_.value);
    if (has_buf2) flat_.buf2 = torch::zeros_like(flat_.value);
  }
  std::int64_t at = 0;
  for (Param& p : params_) {
    auto state = [&](const torch::Tensor& flat_state) {
      return flat_state.defined() ? flat_state.narrow(0, at, p.value.numel()).view(p.value.sizes())
                                  : torch::zeros_like(p.value);
    };
    if (has_buf1) p.buf1 = state(flat_.buf1);
    if (has_buf2) p.buf2 = state(flat_.buf2);
    at += p.value.numel();
  }
}

torch::Tensor Optimizer::flat_grad() const {
  std::vector<torch::Tensor> grads;
  for (const Param& p : params_) grads.push_back(p.value.grad());
  return tiling(grads);
}

void Optimizer::step(double lr) {
  torch::NoGradGuard no_grad;
  ++steps_;
  const double bc1 = 1.0 - std::pow(config_.beta1, static_cast<double>(steps_));
  const double bc2 = 1.0 - std::pow(config_.beta2, static_cast<double>(steps_));
  if (flat()) {
    const torch::Tensor g = flat_grad();
    if (g.defined()) {
      update(flat_, g, lr, bc1, bc2);
      return;
    }
  }
  for (Param& p : params_)
    if (p.value.grad().defined()) update(p, p.value.grad(), lr, bc1, bc2);
}

void Optimizer::update(Param& p, const torch::Tensor& grad, double lr, double bc1, double bc2) const {
  const OptimizerConfig& c = config_;
  if (c.kind == "sgd") {
    torch::Tensor g = c.weight_decay != 0.0 ? grad.add(p.value, c.weight_decay) : grad;
    if (p.buf1.defined()) {
      p.buf1.mul_(c.momentum).add_(g);
      if (c.nesterov) {
        p.value.add_(g, -lr).add_(p.buf1, -lr * c.momentum);
        return;
      }
      g = p.buf1;
    }
    p.value.add_(g, -lr);
  } else {
    torch::Tensor g = grad;
    if (c.kind == "adamw") p.value.mul_(1.0 - lr * c.weight_decay);
    else if (c.weight_decay != 0.0) g = grad.add(p.value, c.weight_decay);
    p.buf1.mul_(c.beta1).add_(g, 1.0 - c.beta1);
    p.buf2.mul_(c.beta2).addcmul_(g, g, 1.0 - c.beta2);
    torch::Tensor denom = (p.buf2.sqrt() / std::sqrt(bc2)).add_(c.eps);
    p.value.addcdiv_(p.buf1, denom, -lr / bc1);
  }
}

// The coefficients step() passes as scalars, as the float the kernels would have used:
//   sgd:        [-lr, -lr * momentum, unused]
//   adam/adamw: [-lr / bc1, 1 / sqrt(bc2) (CUDA divides by a host scalar as a multiply by its float
//               reciprocal), 1 - lr * weight_decay]
// followed by what the fused optimizers read: [lr, the step count (Adam's bias corrections)].
void Optimizer::set_step_coefficients(double lr, std::int64_t steps) {
  if (steps < 1) fail("Optimizer::set_step_coefficients: steps = {}, needs at least 1", steps);
  const OptimizerConfig& c = config_;
  std::vector<float> k(static_cast<std::size_t>(steps) * kCoefficients);
  for (std::int64_t i = 0; i < steps; ++i) {
    ++steps_;
    float* row = k.data() + i * kCoefficients;
    row[0] = static_cast<float>(-lr), row[1] = static_cast<float>(-lr * c.momentum), row[2] = 0.0f;
    row[3] = static_cast<float>(lr), row[4] = static_cast<float>(steps_);
    if (c.kind != "sgd") {
      const double bc1 = 1.0 - std::pow(c.beta1, static_cast<double>(steps_));
      const double bc2 = 1.0 - std::pow(c.beta2, static_cast<double>(steps_));
      row[0] = static_cast<float>(-lr / bc1);
      row[1] = 1.0f / static_cast<float>(std::sqrt(bc2));
      row[2] = static_cast<float>(1.0 - lr * c.weight_decay);
    }
  }
  if (params_.empty()) return;
  const torch::Device device = params_[0].value.device();
  if (!coefficients_.defined() || coefficients_.size(0) != steps)
    coefficients_ = torch::empty({steps, kCoefficients}, torch::TensorOptions().dtype(torch::kFloat).device(device));
  // A fresh pinned block per call: the caching host allocator keeps it until the copy has run, so the
  // host never overwrites values a queued copy has yet to read.
  const torch::Tensor host = torch::from_blob(k.data(), {steps, kCoefficients}, torch::kFloat);
  if (device.is_cuda()) coefficients_.copy_(host.pin_memory(), /*non_blocking=*/true);
  else coefficients_.copy_(host);  // CPU parameters: the tests check the formulas here
}

void Optimizer::step_captured(std::int64_t k) {
  torch::NoGradGuard no_grad;
  if (!coefficients_.defined())
    fail("Optimizer::step_captured before set_step_coefficients: a captured step needs its coefficients");
  if (k < 0 || k >= coefficients_.size(0))
    fail("Optimizer::step_captured({}): set_step_coefficients set {} steps", k, coefficients_.size(0));
  const torch::Tensor row = coefficients_[k];
  if (flat()) {
    const torch::Tensor g = flat_grad();
    if (g.defined()) {
      update_captured(flat_, g, row);
      return;
    }
  }
  for (Param& p : params_)
    if (p.value.grad().defined()) update_captured(p, p.value.grad(), row);
}

// update() with every step-dependent scalar read from coefficients_: a + alpha * b becomes
// a + b * k (addcmul with a 0-dim factor), the same product and sum.
void Optimizer::update_captured(Param& p, const torch::Tensor& grad, const torch::Tensor& k) const {
  const OptimizerConfig& c = config_;
  const torch::Tensor k0 = k[0], k1 = k[1], k2 = k[2];
  if (c.kind == "sgd") {
    torch::Tensor g = c.weight_decay != 0.0 ? grad.add(p.value, c.weight_decay) : grad;
    if (p.buf1.defined()) {
      p.buf1.mul_(c.momentum).add_(g);
      if (c.nesterov) {
        p.value.addcmul_(g, k0).addcmul_(p.buf1, k1);
        return;
      }
      g = p.buf1;
    }
    p.value.addcmul_(g, k0);
  } else {
    torch::Tensor g = grad;
    if (c.kind == "adamw") p.value.mul_(k2);
    else if (c.weight_decay != 0.0) g = grad.add(p.value, c.weight_decay);
    p.buf1.mul_(c.beta1).add_(g, 1.0 - c.beta1);
    p.buf2.mul_(c.beta2).addcmul_(g, g, 1.0 - c.beta2);
    torch::Tensor denom = p.buf2.sqrt().mul_(k1).add_(c.eps);
    p.value.addcmul_(p.buf1.div(denom), k0);
  }
}

#if TORCH_VERSION_MAJOR >= 2
bool Optimizer::fused_available() { return true; }
#else
bool Optimizer::fused_available() { return false; }
#endif

bool Optimizer::fused() const {
  return config_.fused && fused_available() && !params_.empty() && params_[0].value.is_cuda();
}

std::vector<torch::Tensor> Optimizer::parameters() const {
  std::vector<torch::Tensor> out;
  for (const Param& p : params_) out.push_back(p.value);
  return out;
}

void Optimizer::step_fused(const std::vector<torch::Tensor>& grads, std::int64_t k) {
  if (!fused()) fail("Optimizer::step_fused needs LibTorch 2.x and parameters on a GPU");
  if (!coefficients_.defined())
    fail("Optimizer::step_fused before set_step_coefficients: a fused step needs its coefficients");
  if (grads.size() != params_.size())
    fail("Optimizer::step_fused got {} gradients for {} parameters", grads.size(), params_.size());
  if (k < 0 || k >= coefficients_.size(0))
    fail("Optimizer::step_fused(k = {}): set_step_coefficients set {} steps", k, coefficients_.size(0));
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> values, gs, buf1, buf2;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    if (!grads[i].defined()) continue;
    const Param& p = params_[i];
    values.push_back(p.value);
    // The fused kernels walk parameter and gradient as one flat array each: same strides needed.
    gs.push_back(grads[i].strides() == p.value.strides() ? grads[i] : grads[i].contiguous());
    if (p.buf1.defined()) buf1.push_back(p.buf1);
    if (p.buf2.defined()) buf2.push_back(p.buf2);
  }
  if (values.empty()) return;
#if TORCH_VERSION_MAJOR >= 2
  const OptimizerConfig& c = config_;
  const torch::Tensor lr = coefficients_[k][3], step = coefficients_[k][4];
  if (c.kind == "sgd") {
    at::_fused_sgd_(values, gs, buf1, c.weight_decay, c.momentum, lr, /*dampening=*/0.0, c.nesterov,
                    /*maximize=*/false, /*is_first_step=*/false);
    return;
  }
  const std::vector<torch::Tensor> steps(values.size(), step);  // read only: one tensor serves all
  if (c.kind == "adam")
    at::_fused_adam_(values, gs, buf1, buf2, {}, steps, lr, c.beta1, c.beta2, c.weight_decay, c.eps, /*amsgrad=*/false,
                     /*maximize=*/false);
  else
    at::_fused_adamw_(values, gs, buf1, buf2, {}, steps, lr, c.beta1, c.beta2, c.weight_decay, c.eps,
                      /*amsgrad=*/false, /*maximize=*/false);
#endif
}

void Optimizer::zero_grad() {
  std::vector<torch::Tensor> grads;
  for (Param& p : params_)
    if (p.value.grad().defined()) grads.push_back(p.value.grad());
  if (grads.empty()) return;
#if TORCH_VERSION_MAJOR >= 2
  at::_foreach_zero_(grads);  // one launch for all (a captured step counts its launches)
#else
  for (torch::Tensor& g : grads) g.zero_();
#endif
}

std::vector<std::pair<std::string, torch::Tensor>> Optimizer::state_tensors() const {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const Param& p : params_) {
    if (config_.kind == "sgd") {
      if (p.buf1.defined()) out.emplace_back(p.name + ".momentum_buffer", p.buf1);
    } else {
      out.emplace_back(p.name + ".exp_avg", p.buf1);
      out.emplace_back(p.name + ".exp_avg_sq", p.buf2);
    }
  }
  return out;
}

}  // namespace tandem
