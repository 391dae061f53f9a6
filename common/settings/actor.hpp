// The actors' tables: [actor] (what each actor process does and how), [env] (the environments rollout
// actors and RL evaluators step) and [rl] (rollouts, rings and the PPO / V-trace update). Each struct
// is its table, typed; parse() refuses what the table alone can refuse, as one UserError line naming
// the key and the fix. Which env names exist is envs/'s to say (envs/env_source.hpp checks them).
// Torch-free: the launcher parses the same structs before it starts anything.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "common/config.hpp"
#include "common/settings/learner.hpp"

namespace tandem {

struct ActorSettings {
  enum class Role { evaluator, rollout };
  Role role = Role::evaluator;
  std::uint32_t evaluators = 0;     // rollout jobs: the last ones of run.actors evaluate
  std::int64_t eval_episodes = 10;  // RL evaluator
  DeviceSetting device;
  bool cuda_graph = false;
  Precision precision = Precision::fp32;  // the evaluator's forward on the GPU
  int threads = 1;
  std::int64_t batch_size = 1000;  // supervised evaluator
  std::int64_t max_samples = 0;    // 0: the whole test split
  double min_interval_s = 20;
  double wait_weights_s = 300;

  static ActorSettings parse(const Config& config);
  static std::span<const ConfigKey> keys();
};

struct EnvSettings {
  // env.envs' and env.threads' bounds; tandem.envs.make's num_envs and threads take the same ones.
  static constexpr int kMaxEnvs = 65536;
  static constexpr int kMaxThreads = 256;

  std::string name = "cartpole";  // a built-in env, "plugin" or "python"
  std::string plugin;             // the shared library, exactly when name = "plugin"
  std::string python;             // module:Class, exactly when name = "python" (envs/python_env.hpp)
  std::string kwargs = "{}";      // the Python env's keyword arguments, a JSON object
  int envs = 8;                   // per rollout actor
  std::uint64_t seed = 0;
  int threads = 1;  // the rollout actor's VecEnv threads, 1..envs

  bool is_python() const { return name == "python"; }

  static EnvSettings parse(const Config& config);
  static std::span<const ConfigKey> keys();
};

struct RlSettings {
  std::uint32_t rollout_steps = 64;  // T
  std::uint32_t slots_per_ring = 4;
  std::uint32_t slots_per_update = 1;
  std::uint64_t total_env_steps = 1000000;
  bool stop_on_return = false;
  double stop_return = 475;
  double gamma = 0.99, gae_lambda = 0.95;
  std::int64_t update_epochs = 4, minibatches = 4;
  double clip_coef = 0.2;
  bool clip_value = true, norm_adv = true;
  bool norm_obs = false;     // running observation statistics inside the model (rl_model.hpp)
  bool norm_reward = false;  // rewards over the running std of a discounted return (normalizers.hpp)
  double ent_coef = 0.01, vf_coef = 0.5, max_grad_norm = 0.5;
  double rho_bar = 1.0, c_bar = 1.0;
  bool anneal_lr = true;
  // PPO's options beyond CleanRL's recipe (docs/RL.md, "PPO's keys past CleanRL's recipe", says why each exists).
  enum class Targets { gae, vtrace };
  Targets ppo_targets = Targets::gae;  // advantages and value targets
  bool norm_value = false;             // the value head learns returns over their running std
  double kl_coef = 0.0;                // KL(behaviour || current) penalty
  double kl_target = 0.0;              // > 0: the learning rate follows each update's KL

  static RlSettings parse(const Config& config);
  static std::span<const ConfigKey> keys();
};

}  // namespace tandem
