#include "learner/rl/update.hpp"

#include <torch/nn/utils/clip_grad.h>
#include <torch/cuda.h>
#include <torch/types.h>
#include <torch/utils.h>
#include <torch/version.h>

#include <algorithm>
#include <cmath>
#include <functional>

#include "common/log.hpp"
#include "common/torch/rl_model.hpp"
#include "learner/rl/returns.hpp"

namespace tandem::rl {
namespace {

// A non-owning view of `count` elements at `ptr`, shaped `sizes`.
torch::Tensor view_of(void* ptr, const std::vector<std::int64_t>& sizes, torch::Dtype dtype) {
  return torch::from_blob(ptr, sizes, torch::TensorOptions().dtype(dtype));
}

// V of the final observation where a step was truncated, not terminated (only those bootstrap from
// it), else 0: value those alone. `value` maps observations [n, obs_dim] to [n].
torch::Tensor final_values_of(const Batch& b, const std::function<torch::Tensor(const torch::Tensor&)>& value) {
  torch::NoGradGuard no_grad;
  torch::Tensor final_values = torch::zeros_like(b.rewards);
  const torch::Tensor need = (b.truncated.to(torch::kBool) & ~b.terminated.to(torch::kBool)).reshape({-1});
  const torch::Tensor idx = need.nonzero().squeeze(1);
  if (idx.numel() > 0) {
    const torch::Tensor fin = b.final_observations.reshape({-1, b.final_observations.size(-1)}).index_select(0, idx);
    final_values.view({-1}).index_copy_(0, idx, value(fin));
  }
  return final_values;
}

// final_values_of's values for a CUDA graph: every final observation valued, those that do not
// bootstrap masked to 0 afterwards, so that no shape depends on the data (a graph freezes shapes).
torch::Tensor masked_final_values(const Batch& b, const std::function<torch::Tensor(const torch::Tensor&)>& value) {
  torch::NoGradGuard no_grad;
  const torch::Tensor need = b.truncated.to(torch::kBool) & ~b.terminated.to(torch::kBool);
  const torch::Tensor all = value(b.final_observations.reshape({-1, b.final_observations.size(-1)}));
  return torch::where(need, all.view(b.rewards.sizes()), torch::zeros({}, all.options()));
}

// torch::nn::utils::clip_grad_norm_ in a handful of ops instead of a few per parameter (a minibatch
// step of this small a model is dominated by op count), and without reading the norm back: the scale
// is min(1, max_norm / norm) on the device, so a step never waits for the GPU and can be captured.
void clip_grad_norm(const std::vector<torch::Tensor>& params, double max_norm) {
  std::vector<torch::Tensor> grads;
  for (const torch::Tensor& p : params)
    if (p.grad().defined()) grads.push_back(p.grad());
  if (grads.empty()) return;
  const torch::Tensor total = torch::stack(at::_foreach_norm(grads, 2)).norm();
  const torch::Tensor coef = (max_norm / (total + 1e-6)).clamp_max(1.0);
#if TORCH_VERSION_MAJOR >= 2
  at::_foreach_mul_(grads, coef);
#else
  for (torch::Tensor& g : grads) g.mul_(coef);
#endif
}

// 1 - Var(targets - values) / Var(targets): 1 when the values predict the targets, 0 when they
// predict no better than the targets' mean, negative when worse (CleanRL's explained_var).
torch::Tensor explained_variance(const torch::Tensor& targets, const torch::Tensor& values) {
  torch::NoGradGuard no_grad;
  return 1 - (targets - values.detach()).var() / targets.var();
}

}  // namespace

double follow_kl(double lr_scale, double kl, double target) {
  if (!std::isfinite(kl)) return lr_scale;
  if (kl > 2.0 * target) lr_scale /= 1.5;
  else if (kl < 0.5 * target) lr_scale *= 1.5;
  return std::clamp(lr_scale, 0.01, 10.0);
}

std::vector<torch::Tensor> Batch::tensors() const {
  return {observations, final_observations, actions, rewards, terminated, truncated, log_probs};
}

Batch Batch::of(const std::vector<torch::Tensor>& t) { return {t[0], t[1], t[2], t[3], t[4], t[5], t[6]}; }

Batch make_batch(const std::vector<HeldSlot>& slots, const shm::ExperienceDescriptor& d, const torch::Device& device) {
  const std::int64_t T = d.steps, E = d.envs, D = d.obs_dim, A = d.action_dim;
  const bool discrete = d.action_kind == static_cast<std::uint32_t>(shm::ActionKind::discrete);
  std::vector<torch::Tensor> obs, fin, act, rew, term, trunc, lp;
  auto put = [&](std::vector<torch::Tensor>& into, const torch::Tensor& view) {
    into.push_back(view.to(device, /*non_blocking=*/true));  // on the CPU: the view itself
  };
  for (const HeldSlot& h : slots) {
    const shm::SlotView& v = h.view;
    put(obs, view_of(v.observations(), {T + 1, E, D}, torch::kFloat32));
    put(fin, view_of(v.final_observations(), {T, E, D}, torch::kFloat32));
    if (discrete) put(act, view_of(v.discrete_actions(), {T, E}, torch::kInt64));
    else put(act, view_of(v.continuous_actions(), {T, E, A}, torch::kFloat32));
    put(rew, view_of(v.rewards(), {T, E}, torch::kFloat32));
    put(term, view_of(v.terminated(), {T, E}, torch::kUInt8));
    put(trunc, view_of(v.truncated(), {T, E}, torch::kUInt8));
    put(lp, view_of(v.log_probs(), {T, E}, torch::kFloat32));
  }
  // One copy out of the slots, into the batch (the slots stay held until the update is done).
  return {torch::cat(obs, 1),  torch::cat(fin, 1),   torch::cat(act, 1), torch::cat(rew, 1),
          torch::cat(term, 1), torch::cat(trunc, 1), torch::cat(lp, 1)};
}

std::vector<torch::Tensor> PpoSamples::tensors() const {
  return {observations, actions, log_probs, advantages, returns, values};
}

PpoSamples PpoSamples::of(const std::vector<torch::Tensor>& t) { return {t[0], t[1], t[2], t[3], t[4], t[5]}; }

RlUpdater::RlUpdater(Model& model, PolicyHead head, Optimizer& optimizer, Algo algo, const RlSettings& settings,
                     at::Generator generator, ReturnNormalizer* returns)
    : model_(model),
      head_(head),
      optimizer_(optimizer),
      algo_(algo),
      s_(settings),
      generator_(std::move(generator)),
      returns_(returns) {
  if (model_.device().is_cuda()) torch::cuda::manual_seed_all(generator_.current_seed());  // the order on the GPU
}

RlUpdater::Heads RlUpdater::heads(const torch::Tensor& obs) {
  const auto lead = obs.sizes().slice(0, obs.dim() - 1);
  auto out = model_.forward_heads(obs.reshape(rl_model_input_shape(-1, model_.spec())));
  std::vector<std::int64_t> params_shape(lead.begin(), lead.end());
  params_shape.push_back(head_.params_dim());
  return {out[0].reshape(params_shape), out[1].reshape(lead)};
}

// On a GPU the order is drawn there (random keys, sorted), so that a captured update draws a new one
// at every replay; on the CPU from the seeded generator.
torch::Tensor RlUpdater::permutation(std::int64_t n, const torch::Device& device) {
  if (device.is_cuda()) return torch::rand({n}, torch::TensorOptions().device(device)).argsort();
  return torch::randperm(n, generator_, torch::TensorOptions().dtype(torch::kInt64));
}

void RlUpdater::eager_step(const torch::Tensor& loss, double lr) {
  loss.backward();
  if (after_backward_) after_backward_();
  if (s_.max_grad_norm > 0) clip_grad_norm(model_.parameters(), s_.max_grad_norm);
  optimizer_.step(lr);
  optimizer_.zero_grad();
}

void RlUpdater::add_to_stats(const Losses& l, double weight) {
  torch::NoGradGuard no_grad;
  stats_.add_(
      torch::stack({l.total, l.policy, l.value, l.entropy, l.approx_kl, l.clip_frac, l.explained_var, l.adv_std})
          .detach()
          .to(torch::kFloat32),
      weight);
}

UpdateStats RlUpdater::read_stats() {
  std::vector<torch::Tensor> read = {stats_.to(torch::kFloat64)};
  if (returns_) read.push_back(returns_->stddev().reshape({1}));
  const torch::Tensor all = torch::cat(read).to(torch::kCPU);  // the update's one read of the device
  const double* v = all.data_ptr<double>();
  UpdateStats st{.loss = v[0],
                 .policy_loss = v[1],
                 .value_loss = v[2],
                 .entropy = v[3],
                 .approx_kl = v[4],
                 .clip_frac = algo_ == Algo::ppo ? v[5] : shm::kNaN,
                 .explained_var = v[6],
                 .adv_std = v[7],
                 .minibatches = static_cast<int>(steps_per_update())};
  if (returns_) st.return_std = v[8];
  return st;
}

UpdateStats RlUpdater::update(const Batch& batch, double lr) {
  const torch::Device dev = batch.rewards.device();
  if (!stats_.defined() || stats_.device() != dev) stats_ = torch::zeros({8}, torch::TensorOptions().device(dev));
  stats_.zero_();
  if (before_step_) before_step_();  // once before the update's first optimizer step
  if (algo_ == Algo::vtrace) {
    run_epochs(batch.tensors(), lr, [&](const std::vector<torch::Tensor>& t, const Step& step, bool captured) {
      vtrace_epochs(Batch::of(t), step, captured);
    });
  } else {
    run_epochs(ppo_samples(batch).tensors(), lr, [&](const std::vector<torch::Tensor>& t, const Step& step, bool) {
      ppo_epochs(PpoSamples::of(t), step);
    });
  }
  return read_stats();
}

std::optional<std::string> RlUpdater::capture_updates() {
  if (!model_.nn_module())
    return "a TorchScript model is not captured (its forward may branch on the data, which a graph would freeze)";
  if (after_backward_) return "learner ranks synchronise their gradients between backward and the update, on the host";
  if (auto why = GraphCapture::unsupported(model_.device())) return why;
  capture_ = true;
  return std::nullopt;
}

bool RlUpdater::updates_captured() const { return capture_ && graph_ && graph_->captured(); }

void RlUpdater::run_epochs(
    const std::vector<torch::Tensor>& inputs, double lr,
    const std::function<void(const std::vector<torch::Tensor>&, const Step&, bool captured)>& epochs) {
  if (capture_) {
    if (!graph_) {
      for (const torch::Tensor& t : inputs) fixed_.push_back(torch::empty_like(t, torch::MemoryFormat::Contiguous));
      graph_ = std::make_unique<GraphCapture>(model_.device(), 3);
    }
    bool same_shapes = true;
    for (std::size_t i = 0; i < inputs.size(); ++i) same_shapes = same_shapes && inputs[i].sizes() == fixed_[i].sizes();
    if (same_shapes) {
      for (std::size_t i = 0; i < inputs.size(); ++i) fixed_[i].copy_(inputs[i], /*non_blocking=*/true);
      const std::int64_t before = optimizer_.steps_taken();
      optimizer_.set_step_coefficients(lr, steps_per_update());
      std::int64_t k = 0;  // the captured step's row of the coefficient table
      const Step captured_step = [&](const torch::Tensor& loss) {
        if (!one_.defined()) one_ = torch::ones_like(loss);
        loss.backward(one_);
        if (s_.max_grad_norm > 0) clip_grad_norm(model_.parameters(), s_.max_grad_norm);
        if (optimizer_.fused()) {  // one or two launches for every parameter, not a few per parameter
          std::vector<torch::Tensor> grads;
          for (const torch::Tensor& p : optimizer_.parameters()) grads.push_back(p.grad());
          optimizer_.step_fused(grads, k++);
        } else {
          optimizer_.step_captured(k++);
        }
        optimizer_.zero_grad();
      };
      const GraphCapture::Ran ran = graph_->run([&] {
        k = 0;
        epochs(fixed_, captured_step, true);
      });
      if (ran != GraphCapture::Ran::refused) return;
      log::warn("learner.cuda_graph: capturing the {} update failed ({}); updating eagerly from here",
                algo_ == Algo::vtrace ? "V-trace" : "PPO", graph_->why_refused());
      optimizer_.set_steps_taken(before);  // the refused update is taken again, eagerly
      capture_ = false;
    }
  }
  const Step step = [&](const torch::Tensor& loss) { eager_step(loss, lr); };
  epochs(inputs, step, false);
}

PpoSamples RlUpdater::ppo_samples(const Batch& b) {
  torch::NoGradGuard no_grad;
  const std::int64_t T = b.steps(), B = T * b.columns(), D = b.observations.size(-1);
  // Values as returns (de-normalised with rl.norm_value): GAE and V-trace add rewards to them.
  const auto as_return = [&](const torch::Tensor& v) { return returns_ ? returns_->denormalize(v) : v; };
  const Heads h = heads(b.observations);
  const torch::Tensor values = as_return(h.value);
  const torch::Tensor final_values = final_values_of(b,
                                                     [&](const torch::Tensor& o) { return as_return(heads(o).value); });
  const EpisodeSteps steps{b.rewards, values, final_values, b.terminated, b.truncated};
  torch::Tensor advantages, returns;
  if (s_.ppo_targets == RlSettings::Targets::vtrace) {
    // The weights before the update against the behaviour policy: what corrects a slot played by
    // older weights (rho = 1 for an on-policy slot, and V-trace is then GAE with lambda = c_bar).
    const torch::Tensor log_rhos = head_.log_prob(h.params.narrow(0, 0, T), b.actions) - b.log_probs;
    const VtraceResult vt = rl::vtrace(steps, log_rhos, s_.gamma, s_.rho_bar, s_.c_bar);
    advantages = vt.pg_advantages, returns = vt.vs;
  } else {
    const GaeResult g = gae(steps, s_.gamma, s_.gae_lambda);
    advantages = g.advantages, returns = g.returns;
  }
  const torch::Device dev = b.rewards.device();
  returns = returns.to(dev);
  if (returns_) {
    returns_->update(returns);  // this update's targets count, as Sample Factory's
    returns = returns_->normalize(returns);
  }
  return {b.observations.narrow(0, 0, T).reshape({B, D}),
          head_.is_continuous() ? b.actions.reshape({B, -1}) : b.actions.reshape({B}),
          b.log_probs.reshape({B}),
          advantages.to(dev).reshape({B}),
          returns.reshape({B}),
          h.value.narrow(0, 0, T).reshape({B})};
}

void RlUpdater::ppo_epochs(const PpoSamples& all, const Step& step) {
  const std::int64_t B = all.observations.size(0), M = s_.minibatches;
  const std::int64_t mb = B / M;  // the remainder of a pass is left out, as CleanRL does
  for (std::int64_t epoch = 0; epoch < s_.update_epochs; ++epoch) {
    const torch::Tensor perm = permutation(B, all.observations.device()).to(all.observations.device());
    // One gather per epoch; each minibatch is then a contiguous slice (fewer ops per step).
    std::vector<torch::Tensor> shuffled;
    for (const torch::Tensor& t : all.tensors()) shuffled.push_back(t.index_select(0, perm).narrow(0, 0, M * mb));
    // Each minibatch's advantages over their own mean and std (CleanRL's), all of them in one go.
    torch::Tensor& adv = shuffled[3];
    if (s_.norm_adv && mb > 1) {
      const torch::Tensor rows = adv.view({M, mb});
      adv = ((rows - rows.mean(1, true)) / (rows.std(1, /*unbiased=*/true, /*keepdim=*/true) + 1e-8)).view({-1});
    }
    for (std::int64_t m = 0; m < M; ++m) {
      std::vector<torch::Tensor> mini;
      for (const torch::Tensor& t : shuffled) mini.push_back(t.narrow(0, m * mb, mb));
      step(ppo_loss(PpoSamples::of(mini)));
    }
  }
  add_to_stats(ppo_measure(all), 1.0);
}

RlUpdater::PpoTerms RlUpdater::ppo_terms(const Heads& h, const PpoSamples& m, const torch::Tensor& adv) const {
  const torch::Tensor lp = head_.log_prob(h.params, m.actions);
  const torch::Tensor log_ratio = lp - m.log_probs, ratio = log_ratio.exp();
  const torch::Tensor pg = torch::max(-adv * ratio, -adv * ratio.clamp(1 - s_.clip_coef, 1 + s_.clip_coef)).mean();
  torch::Tensor v_loss;
  if (s_.clip_value) {
    const torch::Tensor clipped = m.values + (h.value - m.values).clamp(-s_.clip_coef, s_.clip_coef);
    v_loss = 0.5 * torch::max((h.value - m.returns).pow(2), (clipped - m.returns).pow(2)).mean();
  } else {
    v_loss = 0.5 * (h.value - m.returns).pow(2).mean();
  }
  return {log_ratio, ratio, pg, v_loss};
}

// Only the terms with a weight: a term multiplied by 0 still costs its launches, forward and back.
torch::Tensor RlUpdater::ppo_loss(const PpoSamples& m) {
  const Heads h = heads(m.observations);
  const PpoTerms t = ppo_terms(h, m, m.advantages);
  torch::Tensor total = t.policy + s_.vf_coef * t.value;
  if (s_.ent_coef != 0) total = total - s_.ent_coef * head_.entropy(h.params).mean();
  if (s_.kl_coef > 0) total = total + s_.kl_coef * ((t.ratio - 1) - t.log_ratio).mean();  // KL(behaviour || current)
  return total;
}

Losses RlUpdater::ppo_measure(const PpoSamples& all) {
  torch::NoGradGuard no_grad;
  const Heads h = heads(all.observations);
  torch::Tensor adv = all.advantages;
  if (s_.norm_adv && adv.size(0) > 1) adv = (adv - adv.mean()) / (adv.std() + 1e-8);
  const PpoTerms t = ppo_terms(h, all, adv);
  const torch::Tensor ent = head_.entropy(h.params).mean();
  const torch::Tensor kl = ((t.ratio - 1) - t.log_ratio).mean();
  torch::Tensor total = t.policy - s_.ent_coef * ent + s_.vf_coef * t.value;
  if (s_.kl_coef > 0) total = total + s_.kl_coef * kl;
  const torch::Tensor clipped_share = ((t.ratio - 1).abs() > s_.clip_coef).to(torch::kFloat32).mean();
  return {
      total, t.policy, t.value, ent, kl, clipped_share, explained_variance(all.returns, h.value), all.advantages.std()};
}

void RlUpdater::vtrace_epochs(const Batch& b, const Step& step, bool captured) {
  const std::int64_t N = b.columns();
  const std::int64_t mb = N / s_.minibatches;  // whole trajectories: minibatches split the columns
  for (std::int64_t epoch = 0; epoch < s_.update_epochs; ++epoch) {
    const torch::Tensor perm = permutation(N, b.rewards.device()).to(b.rewards.device());
    for (std::int64_t m = 0; m < s_.minibatches; ++m) {
      const torch::Tensor cols = perm.narrow(0, m * mb, mb);
      std::vector<torch::Tensor> sub;
      for (const torch::Tensor& t : b.tensors()) sub.push_back(t.index_select(1, cols));
      const Losses l = vtrace_losses(Batch::of(sub), captured ? FinalValues::masked : FinalValues::selected);
      add_to_stats(l, 1.0 / static_cast<double>(steps_per_update()));
      step(l.total);
    }
  }
}

Losses RlUpdater::vtrace_losses(const Batch& sub, FinalValues final_values_how) {
  const std::int64_t T = sub.steps();
  const auto value = [&](const torch::Tensor& o) { return heads(o).value; };
  const torch::Tensor final_values = final_values_how == FinalValues::masked ? masked_final_values(sub, value)
                                                                             : final_values_of(sub, value);
  const Heads h = heads(sub.observations);  // [T + 1, mb, P], [T + 1, mb]
  const torch::Tensor params = h.params.narrow(0, 0, T);
  const torch::Tensor lp = head_.log_prob(params, sub.actions);  // target policy, [T, mb]
  const torch::Tensor log_rhos = lp.detach() - sub.log_probs;
  const VtraceResult vt = rl::vtrace({sub.rewards, h.value.detach(), final_values, sub.terminated, sub.truncated},
                                     log_rhos, s_.gamma, s_.rho_bar, s_.c_bar);
  const torch::Device dev = sub.rewards.device();
  const torch::Tensor vs = vt.vs.to(dev), values = h.value.narrow(0, 0, T);
  const torch::Tensor pg = -(lp * vt.pg_advantages.to(dev)).mean();
  const torch::Tensor v_loss = 0.5 * (vs - values).pow(2).mean();
  const torch::Tensor ent = head_.entropy(params).mean();
  const torch::Tensor total = pg - s_.ent_coef * ent + s_.vf_coef * v_loss;
  torch::NoGradGuard no_grad;  // the diagnostics only
  const torch::Tensor kl = ((log_rhos.exp() - 1) - log_rhos).mean();
  return {total,
          pg,
          v_loss,
          ent,
          kl,
          torch::zeros({}, kl.options()),
          explained_variance(vs, values),
          vt.pg_advantages.std()};
}

}  // namespace tandem::rl
