#include "common/torch/rl_model.hpp"

#include <torch/torch.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <optional>

#include "common/error.hpp"

namespace tandem {

PolicyHead policy_head_for(const EnvSpec& env) {
  return env.discrete() ? PolicyHead::discrete(env.num_actions) : PolicyHead::continuous(env.action_dim);
}

Model make_rl_model(const ModelSettings& settings, const RlSettings& rl, const EnvSpec& env) {
  const PolicyHead head = policy_head_for(env);
  if (env.obs_channels < 1 || env.obs_height < 1 || env.obs_dim % (env.obs_channels * env.obs_height) != 0)
    fail("env '{}' observes {} floats, not a {} x {} x W image: a bug in the env's spec", env.name, env.obs_dim,
         env.obs_channels, env.obs_height);
  const ModelSpec spec{.name = settings.name,
                       .channels = env.obs_channels,
                       .height = env.obs_height,
                       .width = env.obs_width(),
                       .num_classes = head.params_dim(),
                       .seed = settings.seed,
                       .gaussian_dims = head.is_continuous() ? head.action_dim() : 0,
                       .norm_obs = rl.norm_obs,
                       .hidden = settings.hidden,
                       .shared_trunk = settings.shared_trunk};
  const std::string needs = fmt::format(
      "env '{}' needs {} policy outputs ({}) and a value head", env.name, head.params_dim(),
      env.discrete() ? fmt::format("{} action logits", env.num_actions)
                     : fmt::format("mean and log-std of {} action dimensions", env.action_dim));
  std::optional<Model> model;
  try {
    model.emplace(Model::create(spec));
  } catch (const UserError& e) {
    fail("model '{}' does not fit: {}; {}: use {} or a model with that head", spec.name, e.what(), needs,
         env.image() ? "actor_critic_cnn" : "actor_critic_mlp");
  }
  model->eval();
  torch::NoGradGuard no_grad;
  const auto out = model->forward_heads(torch::zeros(rl_model_input_shape(2, spec)));
  if (out.size() < 2)
    fail(
        "model '{}' has no value head (it returns {} output{} per sample, not policy and value); {}: use "
        "actor_critic_mlp",
        spec.name, out.size(), out.size() == 1 ? "" : "s", needs);
  if (out[1].numel() != 2)
    fail("model '{}' gives a value of shape [{}] for 2 observations, not one value each; {}: use actor_critic_mlp",
         spec.name, fmt::join(out[1].sizes(), ", "), needs);
  return std::move(*model);
}

std::optional<ObsStats> obs_stats_of(const Model& model) {
  ObsStats stats;
  for (auto& [name, t] : model.named_buffers()) {
    if (name == kObsMeanBuffer) stats.mean = t;
    if (name == kObsVarBuffer) stats.var = t;
    if (name == kObsCountBuffer) stats.count = t;
  }
  if (!stats.mean.defined()) return std::nullopt;
  return stats;
}

}  // namespace tandem
