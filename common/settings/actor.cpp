#include "common/settings/actor.hpp"

#include <filesystem>
#include <vector>

#include "common/error.hpp"

namespace tandem {
namespace {

using T = ConfigType;

// clang-format off
const std::vector<ConfigKey> kActor = {
    {"actor.role", T::string, "\"evaluator\"", "what the actors do: evaluator = evaluate each new weight version (on data.test_split; with learner.algo ppo/vtrace: greedy episodes of env.name); rollout = step env.envs environments with the latest policy and write experience to the learner", {}, {}, {"evaluator", "rollout"}},
    {"actor.evaluators", T::integer, "0", "with actor.role = \"rollout\": how many of run.actors are RL evaluators instead (the last ones)", 0, 4096},
    {"actor.eval_episodes", T::integer, "10", "RL evaluator: greedy episodes per evaluated version, on seeds of its own", 1, 1000000},
    {"actor.device", T::string, "\"cpu\"", "where the actor runs its model: cpu, cuda (GPU 0; a rollout actor: its learner rank's GPU, where the learner keeps a copy of its weights) or cuda:N (GPU N)"},
    {"actor.cuda_graph", T::boolean, "false", "evaluator on cuda: capture the forward and the loss/correct sums of one batch in a CUDA graph and replay it for every full batch; a built-in cnn or resnet18 evaluates with each BatchNorm folded into its convolution (logits within 1e-3 of eager, docs/CUDA_GRAPHS.md), other models bitwise as eager; the last partial batch, a CPU actor and TorchScript models run eagerly"},
    {"actor.precision", T::string, "\"fp32\"", "evaluator on cuda: fp32, or bf16 (activations and matmuls in bfloat16, as torch.autocast does); needs actor.device = cuda", {}, {}, {"fp32", "bf16"}},
    {"actor.threads", T::integer, "1", "LibTorch intra-op threads of each actor", 1, 256},
    {"actor.batch_size", T::integer, "1000", "evaluation batch size", 1, 1048576},
    {"actor.max_samples", T::integer, "0", "evaluate the first N test samples only; 0 = the whole split", 0, 1.0e12},
    {"actor.min_interval_s", T::real, "20", "evaluate at most this often (the newest version wins); the final version is always evaluated", 0.0, 86400.0},
    {"actor.wait_weights_s", T::real, "300", "how long to wait for the learner's weight slab to appear", 0.0, 86400.0},
};
// clang-format on

// clang-format off
const std::vector<ConfigKey> kEnv = {
    {"env.name", T::string, "\"cartpole\"", "environment: cartpole (CartPole-v1), acrobot (Acrobot-v1), mountaincar (MountainCar-v0), pendulum (Pendulum-v1), the MuJoCo tasks hopper, walker2d, halfcheetah, ant, humanoid (ours after Gymnasium's -v5, docs/ENVS.md), breakout (MinAtar's, 4 x 10 x 10 images: model.name = \"actor_critic_cnn\"), null (no dynamics, for overhead figures), plugin (env.plugin), python (env.python)"},
    {"env.plugin", T::string, "\"\"", "with env.name = \"plugin\": path of a shared library implementing envs/tandem_env.h"},
    {"env.python", T::string, "\"\"", "with env.name = \"python\": module:Class of a Gymnasium-API env written in Python (importable from the job's directory or PYTHONPATH), stepped by the Python rollout actor (docs/RL.md)"},
    {"env.kwargs", T::string, "\"{}\"", "with env.name = \"python\": the env's keyword arguments as a JSON object, e.g. '{\"max_episode_steps\": 200}'"},
    {"env.envs", T::integer, "8", "environments per rollout actor, stepped together (the policy runs batched over them)", 1, EnvSettings::kMaxEnvs},
    {"env.seed", T::integer, "0", "job seed: env e of actor a is seeded from (env.seed, a, e); evaluators use seeds of their own", 0, 9.0e15},
    {"env.threads", T::integer, "1", "threads each rollout actor steps its env.envs environments on, each starting on a contiguous slice of them and then taking envs the others have not reached (at most env.envs); the results are the same for any count", 1, EnvSettings::kMaxThreads},
};
// clang-format on

// clang-format off
const std::vector<ConfigKey> kRl = {
    {"rl.rollout_steps", T::integer, "64", "steps per env in one trajectory slot (T): a slot holds T x env.envs steps", 1, 65536},
    {"rl.slots_per_ring", T::integer, "4", "trajectory slots in each actor's ring; a full ring makes the actor wait", 1, 65536},
    {"rl.slots_per_update", T::integer, "1", "trajectory slots (from any actors) in one learner update", 1, 65536},
    {"rl.total_env_steps", T::integer, "1000000", "training length in environment steps the learner consumes", 1, 1.0e15},
    {"rl.stop_on_return", T::boolean, "false", "finish early once the mean return of the last 100 training episodes reaches rl.stop_return"},
    {"rl.stop_return", T::real, "475", "see rl.stop_on_return", -1.0e12, 1.0e12},
    {"rl.gamma", T::real, "0.99", "discount factor", 0.0, 1.0},
    {"rl.gae_lambda", T::real, "0.95", "PPO: GAE lambda", 0.0, 1.0},
    {"rl.update_epochs", T::integer, "4", "PPO: passes over each batch", 1, 10000},
    {"rl.minibatches", T::integer, "4", "PPO: minibatches per pass", 1, 1000000},
    {"rl.clip_coef", T::real, "0.2", "PPO: policy ratio clip", 0.0, 10.0},
    {"rl.clip_value", T::boolean, "true", "PPO: clip the value loss around the behaviour values"},
    {"rl.norm_adv", T::boolean, "true", "PPO: normalise advantages per minibatch"},
    {"rl.norm_obs", T::boolean, "false", "normalise observations inside actor_critic_mlp by their running mean and variance (gymnasium's NormalizeObservation, clipped to +-10); the learner updates them from each update's observations, the weight slab and checkpoints carry them"},
    {"rl.norm_reward", T::boolean, "false", "the learner divides rewards by the running std of each env's discounted return (gymnasium's NormalizeReward with rl.gamma, clipped to +-10); kept in checkpoints"},
    {"rl.ent_coef", T::real, "0.01", "entropy bonus coefficient", 0.0, 100.0},
    {"rl.vf_coef", T::real, "0.5", "value loss coefficient", 0.0, 100.0},
    {"rl.max_grad_norm", T::real, "0.5", "clip the global gradient norm to this; 0 = off", 0.0, 1.0e6},
    {"rl.rho_bar", T::real, "1.0", "V-trace: truncation of the importance weights in the value targets", 0.0, 1.0e6},
    {"rl.c_bar", T::real, "1.0", "V-trace: truncation of the trace-cutting coefficients", 0.0, 1.0e6},
    {"rl.anneal_lr", T::boolean, "true", "decay optimizer.lr linearly to 0 over rl.total_env_steps"},
    {"rl.ppo_targets", T::string, "\"gae\"", "PPO: advantages and value targets from gae (GAE with rl.gae_lambda), or vtrace (V-trace with rl.rho_bar and rl.c_bar, the policy before the update against the behaviour policy: corrects the targets of slots played by older weights, as Sample Factory's APPO)", {}, {}, {"gae", "vtrace"}},
    {"rl.norm_value", T::boolean, "false", "PPO: the value head learns the value targets normalised by their running mean and std (Sample Factory's normalize_returns); its outputs are de-normalised for GAE and V-trace; kept in checkpoints"},
    {"rl.kl_coef", T::real, "0", "PPO: coefficient of a penalty on KL(behaviour || current), estimated per sample from the log-probabilities as (r - 1) - log r (Sample Factory's kl_loss_coeff); 0 = off", 0.0, 100.0},
    {"rl.kl_target", T::real, "0", "PPO: > 0 adapts the learning rate after every update: / 1.5 when the update's mean KL is above 2 x rl.kl_target, x 1.5 when below half of it, within [optimizer.lr / 100, optimizer.lr x 10] (rl_games' adaptive schedule); replaces rl.anneal_lr (set it false); 0 = off", 0.0, 10.0},
};
// clang-format on

}  // namespace

ActorSettings ActorSettings::parse(const Config& c) {
  ActorSettings s{.role = c.string("actor.role") == "rollout" ? Role::rollout : Role::evaluator,
                  .evaluators = static_cast<std::uint32_t>(c.integer("actor.evaluators")),
                  .eval_episodes = c.integer("actor.eval_episodes"),
                  .device = DeviceSetting::parse("actor.device", c.string("actor.device")),
                  .cuda_graph = c.boolean("actor.cuda_graph"),
                  .precision = parse_precision(c.string("actor.precision")),
                  .threads = static_cast<int>(c.integer("actor.threads")),
                  .batch_size = c.integer("actor.batch_size"),
                  .max_samples = c.integer("actor.max_samples"),
                  .min_interval_s = c.real("actor.min_interval_s"),
                  .wait_weights_s = c.real("actor.wait_weights_s")};
  if (s.precision == Precision::bf16 && !s.device.cuda)
    fail(
        "config: actor.precision = \"bf16\" needs actor.device = \"cuda\" (a CPU forward runs float32): set the "
        "device or actor.precision = \"fp32\"");
  return s;
}

std::span<const ConfigKey> ActorSettings::keys() { return kActor; }

EnvSettings EnvSettings::parse(const Config& c) {
  EnvSettings s{.name = c.string("env.name"),
                .plugin = c.string("env.plugin"),
                .python = c.string("env.python"),
                .kwargs = c.string("env.kwargs"),
                .envs = static_cast<int>(c.integer("env.envs")),
                .seed = static_cast<std::uint64_t>(c.integer("env.seed")),
                .threads = static_cast<int>(c.integer("env.threads"))};
  std::error_code ec;
  if (s.name == "plugin" && s.plugin.empty())
    fail("config: env.name = \"plugin\" but env.plugin is empty: set it to the path of your env's shared library");
  if (s.name == "plugin" && !std::filesystem::is_regular_file(s.plugin, ec))
    fail(
        "config: env.plugin = \"{}\" is not a file: give the path of a shared library implementing "
        "envs/tandem_env.h",
        s.plugin);
  if (s.name != "plugin" && !s.plugin.empty())
    fail(
        "config: env.plugin = \"{}\" is set but env.name = \"{}\": set env.name = \"plugin\" to load it, or "
        "remove env.plugin",
        s.plugin, s.name);
  if (s.is_python() && s.python.find(':') == std::string::npos)
    fail(
        "config: env.name = \"python\" needs env.python = \"module:Class\" (now \"{}\"): name your env's module and "
        "class, e.g. \"examples.python.envs.cartpole:CartPole\"",
        s.python);
  if (s.threads > s.envs)
    fail(
        "config: env.threads = {} is more than env.envs = {}: each thread steps at least one env; set env.threads <= {}",
        s.threads, s.envs, s.envs);
  if (s.is_python() && s.threads != 1)
    fail("config: env.threads = {} but the Python rollout actor steps its envs on one thread: set env.threads = 1",
         s.threads);
  if (!s.is_python() && (!s.python.empty() || s.kwargs != "{}"))
    fail("config: env.python / env.kwargs are set but env.name = \"{}\": set env.name = \"python\", or remove them",
         s.name);
  return s;
}

std::span<const ConfigKey> EnvSettings::keys() { return kEnv; }

RlSettings RlSettings::parse(const Config& c) {
  return {.rollout_steps = static_cast<std::uint32_t>(c.integer("rl.rollout_steps")),
          .slots_per_ring = static_cast<std::uint32_t>(c.integer("rl.slots_per_ring")),
          .slots_per_update = static_cast<std::uint32_t>(c.integer("rl.slots_per_update")),
          .total_env_steps = static_cast<std::uint64_t>(c.integer("rl.total_env_steps")),
          .stop_on_return = c.boolean("rl.stop_on_return"),
          .stop_return = c.real("rl.stop_return"),
          .gamma = c.real("rl.gamma"),
          .gae_lambda = c.real("rl.gae_lambda"),
          .update_epochs = c.integer("rl.update_epochs"),
          .minibatches = c.integer("rl.minibatches"),
          .clip_coef = c.real("rl.clip_coef"),
          .clip_value = c.boolean("rl.clip_value"),
          .norm_adv = c.boolean("rl.norm_adv"),
          .norm_obs = c.boolean("rl.norm_obs"),
          .norm_reward = c.boolean("rl.norm_reward"),
          .ent_coef = c.real("rl.ent_coef"),
          .vf_coef = c.real("rl.vf_coef"),
          .max_grad_norm = c.real("rl.max_grad_norm"),
          .rho_bar = c.real("rl.rho_bar"),
          .c_bar = c.real("rl.c_bar"),
          .anneal_lr = c.boolean("rl.anneal_lr"),
          .ppo_targets = c.string("rl.ppo_targets") == "vtrace" ? RlSettings::Targets::vtrace
                                                                : RlSettings::Targets::gae,
          .norm_value = c.boolean("rl.norm_value"),
          .kl_coef = c.real("rl.kl_coef"),
          .kl_target = c.real("rl.kl_target")};
}

std::span<const ConfigKey> RlSettings::keys() { return kRl; }

}  // namespace tandem
