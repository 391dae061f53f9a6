#include "actor/rl_setup.hpp"

#include <torch/types.h>
#include <torch/utils.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/error.hpp"

namespace tandem::actor {
namespace {

// env.name values -> the ids make_env() knows.
std::string builtin_id(const std::string& name) {
  if (name == "cartpole") return "CartPole-v1";
  if (name == "acrobot") return "Acrobot-v1";
  if (name == "mountaincar") return "MountainCar-v0";
  if (name == "pendulum") return "Pendulum-v1";
  return name;  // "null", or anything else: make_env() names the choices
}

}  // namespace

EnvSource::EnvSource(const Config& config) {
  const std::string name = config.string("env.name");
  const std::string plugin = config.string("env.plugin");
  if (name == "plugin") {
    if (plugin.empty()) fail("config: env.name = \"plugin\" but env.plugin is empty: set it to your env's .so");
    plugin_ = envs::PluginLibrary::open(plugin);
  } else {
    builtin_ = builtin_id(name);
  }
  spec_ = make()->spec();
}

std::unique_ptr<envs::Env> EnvSource::make() const {
  if (plugin_) return envs::PluginEnv::create(plugin_, "", spec_);  // spec_ is empty (unchecked) the first time
  return envs::make_env(builtin_);
}

std::vector<std::unique_ptr<envs::Env>> EnvSource::make(int count) const {
  std::vector<std::unique_ptr<envs::Env>> out;
  out.reserve(static_cast<std::size_t>(count));
  for (int i = 0; i < count; ++i) out.push_back(make());
  return out;
}

PolicyHead policy_head_for(const envs::EnvSpec& spec) {
  return spec.discrete() ? PolicyHead::discrete(spec.num_actions) : PolicyHead::continuous(spec.action_dim);
}

Model make_rl_model(const Config& config, const envs::EnvSpec& spec) {
  const PolicyHead head = policy_head_for(spec);
  Model model = Model::create({.name = config.string("model.name"), .channels = 1, .height = 1,
                               .width = spec.obs_dim, .num_classes = head.params_dim(),
                               .seed = static_cast<std::uint64_t>(config.integer("model.seed"))});
  model.eval();
  torch::NoGradGuard no_grad;
  const auto heads = model.forward_heads(torch::zeros(model_input_shape(2, spec.obs_dim)));
  if (heads.size() < 2 || heads[1].numel() != 2)
    fail("model '{}' gives {} for env '{}': an RL policy must return (params [B, {}], value [B]); use "
         "actor_critic_mlp or a TorchScript actor-critic",
         config.string("model.name"),
         heads.size() < 2 ? std::string("no value head")
                          : fmt::format("a value of shape [{}] for 2 observations", fmt::join(heads[1].sizes(), ", ")),
         spec.name, head.params_dim());
  return model;
}

}  // namespace tandem::actor
