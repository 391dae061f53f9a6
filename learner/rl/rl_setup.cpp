#include "learner/rl/rl_setup.hpp"

#include <torch/types.h>
#include <torch/utils.h>

#include <cstdlib>
#include <map>

#include "common/error.hpp"
#include "common/program.hpp"
#include "envs/plugin_env.hpp"

namespace tandem::rl {

std::uint32_t rollout_actor_count(const Config& config) {
  const char* actors = std::getenv("TANDEM_ACTORS");
  if (actors == nullptr || *actors == '\0') return 1;  // started by hand: one ring
  char* end = nullptr;
  const long long n = std::strtoll(actors, &end, 10);
  if (*end != '\0' || n < 0)
    fail("TANDEM_ACTORS='{}' is not a count of actors: it is set by `tandem run` (unset it to run by hand)", actors);
  const long long evaluators = config.string("actor.role") == "rollout" ? config.integer("actor.evaluators") : n;
  if (n - evaluators < 1)
    fail("learner.algo = \"{}\" needs rollout actors, but run.actors = {} with {} of them evaluators: set "
         "actor.role = \"rollout\" and run.actors above actor.evaluators",
         config.string("learner.algo"), n, evaluators);
  return static_cast<std::uint32_t>(n - evaluators);
}

RlSettings rl_settings(const Config& c) {
  RlSettings s;
  s.algo = c.string("learner.algo");
  s.rollout_actors = rollout_actor_count(c);
  s.steps = static_cast<std::uint32_t>(c.integer("rl.rollout_steps"));
  s.envs = static_cast<std::uint32_t>(c.integer("env.envs"));
  s.slots_per_ring = static_cast<std::uint32_t>(c.integer("rl.slots_per_ring"));
  s.slots_per_update = static_cast<std::uint32_t>(c.integer("rl.slots_per_update"));
  s.total_env_steps = static_cast<std::uint64_t>(c.integer("rl.total_env_steps"));
  s.stop_on_return = c.boolean("rl.stop_on_return");
  s.stop_return = c.real("rl.stop_return");
  s.gamma = c.real("rl.gamma");
  s.gae_lambda = c.real("rl.gae_lambda");
  s.update_epochs = c.integer("rl.update_epochs");
  s.minibatches = c.integer("rl.minibatches");
  s.clip_coef = c.real("rl.clip_coef");
  s.clip_value = c.boolean("rl.clip_value");
  s.norm_adv = c.boolean("rl.norm_adv");
  s.ent_coef = c.real("rl.ent_coef");
  s.vf_coef = c.real("rl.vf_coef");
  s.max_grad_norm = c.real("rl.max_grad_norm");
  s.rho_bar = c.real("rl.rho_bar");
  s.c_bar = c.real("rl.c_bar");
  s.anneal_lr = c.boolean("rl.anneal_lr");
  s.lr = c.real("learner.lr");
  s.deterministic = deterministic_mode();

  const std::uint64_t R = s.rollout_actors;
  // The learner holds every slot of an update until the update has used it (zero-copy), so the rings
  // must be able to hold them all at once, or learner and actors would wait for each other forever.
  if (s.deterministic) {
    if (s.slots_per_update % R != 0)
      fail("run.deterministic: rl.slots_per_update = {} does not divide among {} rollout actors: set it to a "
           "multiple of {}", s.slots_per_update, R, R);
    s.slots_per_actor = static_cast<std::uint32_t>(s.slots_per_update / R);
    if (s.slots_per_actor > s.slots_per_ring)
      fail("run.deterministic: each update takes {} slots from every actor but rl.slots_per_ring = {}: set "
           "rl.slots_per_ring to at least {}", s.slots_per_actor, s.slots_per_ring, s.slots_per_actor);
  } else if (s.slots_per_update > R * s.slots_per_ring) {
    fail("rl.slots_per_update = {} is more than the {} rings x rl.slots_per_ring = {} can hold: raise "
         "rl.slots_per_ring or lower rl.slots_per_update", s.slots_per_update, R, s.slots_per_ring);
  }
  const std::uint64_t columns = std::uint64_t{s.slots_per_update} * s.envs;
  const std::uint64_t samples = columns * s.steps;
  const std::uint64_t split = s.algo == "ppo" ? samples : columns;  // V-trace keeps whole trajectories
  if (static_cast<std::uint64_t>(s.minibatches) > split)
    fail("rl.minibatches = {} is more than the {} {} of one update: lower rl.minibatches", s.minibatches, split,
         s.algo == "ppo" ? "samples" : "trajectories (V-trace splits by trajectory)");
  return s;
}

envs::EnvSpec env_spec_for(const Config& c) {
  const std::string name = c.string("env.name");
  if (name == "plugin") {
    const std::string path = c.string("env.plugin");
    if (path.empty()) fail("env.name = \"plugin\" needs env.plugin: set it to the path of your env's shared library");
    return envs::PluginEnv::create(envs::PluginLibrary::open(path), "")->spec();
  }
  static const std::map<std::string, std::string> ids = {{"cartpole", "CartPole-v1"},
                                                          {"acrobot", "Acrobot-v1"},
                                                          {"mountaincar", "MountainCar-v0"},
                                                          {"pendulum", "Pendulum-v1"},
                                                          {"null", "null"}};
  const auto id = ids.find(name);
  return envs::make_env(id == ids.end() ? name : id->second)->spec();
}

PolicyHead policy_head_for(const envs::EnvSpec& env) {
  return env.discrete() ? PolicyHead::discrete(env.num_actions) : PolicyHead::continuous(env.action_dim);
}

shm::ExperienceShape experience_shape(const RlSettings& s, const envs::EnvSpec& env, const PolicyHead& head) {
  shm::ExperienceShape shape;
  shape.num_actors = s.rollout_actors;
  shape.slots_per_ring = s.slots_per_ring;
  shape.steps = s.steps;
  shape.envs = s.envs;
  shape.obs_dim = static_cast<std::uint32_t>(env.obs_dim);
  shape.action_kind = env.discrete() ? shm::ActionKind::discrete : shm::ActionKind::continuous;
  shape.action_dim = env.discrete() ? 1 : static_cast<std::uint32_t>(env.action_dim);
  shape.logits_dim = static_cast<std::uint32_t>(head.params_dim());
  return shape;
}

Model rl_model(const Config& config, const envs::EnvSpec& env, const PolicyHead& head) {
  const ModelSpec spec{.name = config.string("model.name"), .channels = 1, .height = 1, .width = env.obs_dim,
                       .num_classes = head.params_dim(),
                       .seed = static_cast<std::uint64_t>(config.integer("model.seed"))};
  const std::string needs = fmt::format(
      "env '{}' needs {} policy outputs ({}) and a value head", env.name, head.params_dim(),
      env.discrete() ? fmt::format("{} action logits", env.num_actions)
                     : fmt::format("mean and log-std of {} action dimensions", env.action_dim));
  std::optional<Model> model;
  try {
    model.emplace(Model::create(spec));
  } catch (const UserError& e) {
    fail("model '{}' does not fit: {}; {}: use actor_critic_mlp or a model with that head", spec.name, e.what(),
         needs);
  }
  torch::NoGradGuard no_grad;
  model->eval();
  const auto out = model->forward_heads(torch::zeros({2, 1, 1, env.obs_dim}));
  model->train(true);
  if (out.size() < 2 || out[1].numel() != 2)
    fail("model '{}' has no value head (it returns {} output{} per sample, not policy and value); {}: use "
         "actor_critic_mlp", spec.name, out.size(), out.size() == 1 ? "" : "s", needs);
  return std::move(*model);
}

}  // namespace tandem::rl
