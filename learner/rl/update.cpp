#include "learner/rl/update.hpp"

#include <torch/nn/utils/clip_grad.h>
#include <torch/types.h>
#include <torch/utils.h>

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
  for (torch::Tensor& g : grads) g.mul_(coef);
}

}  // namespace

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

RlUpdater::RlUpdater(Model& model, PolicyHead head, Optimizer& optimizer, Algo algo, const RlSettings& settings,
                     at::Generator generator)
    : model_(model), head_(head), optimizer_(optimizer), algo_(algo), s_(settings), generator_(std::move(generator)) {}

RlUpdater::Heads RlUpdater::heads(const torch::Tensor& obs) {
  const auto lead = obs.sizes().slice(0, obs.dim() - 1);
  auto out = model_.forward_heads(obs.reshape(rl_model_input_shape(-1, model_.spec())));
  std::vector<std::int64_t> params_shape(lead.begin(), lead.end());
  params_shape.push_back(head_.params_dim());
  return {out[0].reshape(params_shape), out[1].reshape(lead)};
}

std::pair<torch::Tensor, torch::Tensor> RlUpdater::values_of(const Batch& b) {
  torch::NoGradGuard no_grad;
  return {heads(b.observations).value, final_values_of(b, [&](const torch::Tensor& o) { return heads(o).value; })};
}

void RlUpdater::step(const Losses& losses, double lr) {
  losses.total.backward();
  if (after_backward_) after_backward_();
  if (s_.max_grad_norm > 0) clip_grad_norm(model_.parameters(), s_.max_grad_norm);
  if (before_step_) before_step_();
  optimizer_.step(lr);
  optimizer_.zero_grad();
  add_to_sums(losses);
}

void RlUpdater::add_to_sums(const Losses& losses) {
  torch::NoGradGuard no_grad;
  sums_.add_(torch::stack({losses.total, losses.policy, losses.value, losses.entropy}).detach());
}

UpdateStats RlUpdater::read_sums(int minibatches) {
  const torch::Tensor sums = sums_.to(torch::kCPU, torch::kFloat64);  // the update's one read of the device
  const double n = minibatches > 0 ? minibatches : 1;
  const double* v = sums.data_ptr<double>();
  return {v[0] / n, v[1] / n, v[2] / n, v[3] / n, minibatches};
}

UpdateStats RlUpdater::update(const Batch& batch, double lr) {
  const torch::Device dev = batch.rewards.device();
  if (!sums_.defined() || sums_.device() != dev) sums_ = torch::zeros({4}, torch::TensorOptions().device(dev));
  sums_.zero_();
  return algo_ == Algo::vtrace ? vtrace(batch, lr) : ppo(batch, lr);
}

std::optional<std::string> RlUpdater::capture_minibatches() {
  if (!model_.nn_module())
    return "a TorchScript model is not captured (its forward may branch on the data, which a graph would freeze)";
  if (after_backward_) return "learner ranks synchronise their gradients between backward and the update, on the host";
  if (auto why = GraphCapture::unsupported(model_.device())) return why;
  capture_ = true;
  return std::nullopt;
}

bool RlUpdater::minibatches_captured() const { return capture_ && graph_ && graph_->captured(); }

bool RlUpdater::replay(const std::vector<torch::Tensor>& inputs, double lr,
                       const std::function<Losses(const std::vector<torch::Tensor>&)>& losses_of) {
  if (!graph_) {
    for (const torch::Tensor& t : inputs) fixed_.push_back(torch::empty_like(t, torch::MemoryFormat::Contiguous));
    graph_ = std::make_unique<GraphCapture>(model_.device(), 3);
  }
  for (std::size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].sizes() != fixed_[i].sizes()) return false;  // another minibatch size: eager
  for (std::size_t i = 0; i < inputs.size(); ++i) fixed_[i].copy_(inputs[i], /*non_blocking=*/true);
  if (before_step_) before_step_();  // the publisher's fence, before the graph's update as before the eager one
  const std::int64_t before = optimizer_.steps_taken();
  optimizer_.set_step_coefficients(lr);
  const GraphCapture::Ran ran = graph_->run([&] {
    const Losses l = losses_of(fixed_);
    if (!one_.defined()) one_ = torch::ones_like(l.total);
    l.total.backward(one_);
    if (s_.max_grad_norm > 0) clip_grad_norm(model_.parameters(), s_.max_grad_norm);
    optimizer_.step_captured();
    optimizer_.zero_grad();
    add_to_sums(l);
  });
  if (ran != GraphCapture::Ran::refused) return true;
  log::warn("learner.cuda_graph: capturing the {} minibatch step failed ({}); updating eagerly from here",
            algo_ == Algo::vtrace ? "V-trace" : "PPO", graph_->why_refused());
  optimizer_.set_steps_taken(before);  // the refused step is taken again, eagerly
  capture_ = false;
  return false;
}

UpdateStats RlUpdater::ppo(const Batch& b, double lr) {
  const auto [values, final_values] = values_of(b);
  const std::int64_t T = b.steps();
  const GaeResult g = gae({b.rewards, values, final_values, b.terminated, b.truncated}, s_.gamma, s_.gae_lambda);
  const torch::Device dev = b.rewards.device();
  const std::int64_t B = T * b.columns(), D = b.observations.size(-1);
  const torch::Tensor obs = b.observations.narrow(0, 0, T).reshape({B, D});
  const torch::Tensor act = head_.is_continuous() ? b.actions.reshape({B, -1}) : b.actions.reshape({B});
  const torch::Tensor old_lp = b.log_probs.reshape({B});
  const torch::Tensor adv_all = g.advantages.to(dev).reshape({B}), ret_all = g.returns.to(dev).reshape({B});
  const torch::Tensor old_v = values.narrow(0, 0, T).reshape({B});

  const std::int64_t mb = B / s_.minibatches;  // the remainder of a pass is left out, as CleanRL does
  for (std::int64_t epoch = 0; epoch < s_.update_epochs; ++epoch) {
    const torch::Tensor perm = torch::randperm(B, generator_, torch::TensorOptions().dtype(torch::kInt64)).to(dev);
    // One gather per epoch; each minibatch is then a contiguous slice (fewer ops per step).
    const PpoMinibatch shuffled{obs.index_select(0, perm),     act.index_select(0, perm),
                                old_lp.index_select(0, perm),  adv_all.index_select(0, perm),
                                ret_all.index_select(0, perm), old_v.index_select(0, perm)};
    for (std::int64_t m = 0; m < s_.minibatches; ++m) {
      auto slice = [&](const torch::Tensor& t) { return t.narrow(0, m * mb, mb); };
      const PpoMinibatch mini{slice(shuffled.observations), slice(shuffled.actions), slice(shuffled.log_probs),
                              slice(shuffled.advantages),   slice(shuffled.returns), slice(shuffled.values)};
      const auto captured = [&](const std::vector<torch::Tensor>& f) {
        return ppo_losses({f[0], f[1], f[2], f[3], f[4], f[5]});
      };
      if (capture_ &&
          replay({mini.observations, mini.actions, mini.log_probs, mini.advantages, mini.returns, mini.values}, lr,
                 captured))
        continue;
      step(ppo_losses(mini), lr);
    }
  }
  return read_sums(static_cast<int>(s_.update_epochs * s_.minibatches));
}

Losses RlUpdater::ppo_losses(const PpoMinibatch& m) {
  const Heads h = heads(m.observations);
  const torch::Tensor lp = head_.log_prob(h.params, m.actions);
  const torch::Tensor ratio = (lp - m.log_probs).exp();
  torch::Tensor adv = m.advantages;
  if (s_.norm_adv && adv.size(0) > 1) adv = (adv - adv.mean()) / (adv.std() + 1e-8);
  const torch::Tensor pg = torch::max(-adv * ratio, -adv * ratio.clamp(1 - s_.clip_coef, 1 + s_.clip_coef)).mean();
  torch::Tensor v_loss;
  if (s_.clip_value) {
    const torch::Tensor clipped = m.values + (h.value - m.values).clamp(-s_.clip_coef, s_.clip_coef);
    v_loss = 0.5 * torch::max((h.value - m.returns).pow(2), (clipped - m.returns).pow(2)).mean();
  } else {
    v_loss = 0.5 * (h.value - m.returns).pow(2).mean();
  }
  const torch::Tensor ent = head_.entropy(h.params).mean();
  return {pg - s_.ent_coef * ent + s_.vf_coef * v_loss, pg, v_loss, ent};
}

UpdateStats RlUpdater::vtrace(const Batch& b, double lr) {
  const std::int64_t N = b.columns();
  const torch::Device dev = b.rewards.device();
  const std::int64_t mb = N / s_.minibatches;  // whole trajectories: minibatches split the columns
  for (std::int64_t epoch = 0; epoch < s_.update_epochs; ++epoch) {
    const torch::Tensor perm = torch::randperm(N, generator_, torch::TensorOptions().dtype(torch::kInt64)).to(dev);
    for (std::int64_t m = 0; m < s_.minibatches; ++m) {
      const torch::Tensor cols = perm.narrow(0, m * mb, mb);
      Batch sub{b.observations.index_select(1, cols), b.final_observations.index_select(1, cols),
                b.actions.index_select(1, cols),      b.rewards.index_select(1, cols),
                b.terminated.index_select(1, cols),   b.truncated.index_select(1, cols),
                b.log_probs.index_select(1, cols)};
      const auto captured = [&](const std::vector<torch::Tensor>& f) {
        return vtrace_losses({f[0], f[1], f[2], f[3], f[4], f[5], f[6]}, FinalValues::masked);
      };
      if (capture_ && replay({sub.observations, sub.final_observations, sub.actions, sub.rewards, sub.terminated,
                              sub.truncated, sub.log_probs},
                             lr, captured))
        continue;
      step(vtrace_losses(sub, FinalValues::selected), lr);
    }
  }
  return read_sums(static_cast<int>(s_.update_epochs * s_.minibatches));
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
  const torch::Tensor pg = -(lp * vt.pg_advantages.to(dev)).mean();
  const torch::Tensor v_loss = 0.5 * (vt.vs.to(dev) - h.value.narrow(0, 0, T)).pow(2).mean();
  const torch::Tensor ent = head_.entropy(params).mean();
  return {pg - s_.ent_coef * ent + s_.vf_coef * v_loss, pg, v_loss, ent};
}

}  // namespace tandem::rl
