#include "common/job_keys.hpp"

#include <cmath>
#include <cstdlib>
#include <sstream>

#include "common/error.hpp"

namespace tandem {
namespace {

using T = ConfigType;

const std::vector<ConfigKey> kData = {
    {"data.name", T::string, "\"fmnist\"", "dataset cache /tandem.data.<name> to train and evaluate on; preload it first (`tandem data preload <name> --from <dir>`; tools/demo does it)"},
    {"data.from", T::string, "\"/usr/share/datasets/fashion-mnist\"", "where tools/demo preloads data.name from when the cache is missing (IDX, CIFAR-10 batches or .npy); the programs only read the cache"},
    {"data.mean", T::string, "\"0.2860\"", "input normalisation (x/255 - mean) / std: one value, or one per channel separated by commas"},
    {"data.std", T::string, "\"0.3530\"", "input normalisation divisor: one value, or one per channel separated by commas"},
    {"data.train_split", T::string, "\"train\"", "split the learner trains on"},
    {"data.test_split", T::string, "\"test\"", "split the evaluators evaluate on"},
};

const std::vector<ConfigKey> kModel = {
    {"model.name", T::string, "\"cnn\"", "mlp, cnn, resnet18 (32x32), actor_critic_mlp, or a TorchScript file path; input shape comes from the cache"},
    {"model.num_classes", T::integer, "10", "output classes (labels must be 0..num_classes-1)", 1, 1000000},
    {"model.seed", T::integer, "0", "seed of the initial weights (learner and actors build the same model)", 0, 9.0e15},
};

const std::vector<ConfigKey> kLearner = {
    {"learner.device", T::string, "\"cpu\"", "where the learner trains", {}, {}, {"cpu", "cuda"}},
    {"learner.feed", T::string, "\"host\"", "host: CPU worker threads gather batches (copied to the GPU on cuda); device: the whole split is gathered on the GPU (cuda only)", {}, {}, {"host", "device"}},
    {"learner.cuda_graph", T::boolean, "false", "capture the whole training step (feed gather, forward, backward, optimizer) in a CUDA graph and replay it each step: far fewer kernel launches; supervised learner only; falls back to eager, saying why once, with a CPU learner, a TorchScript model, data-parallel ranks, an RL algo, or a step that cannot be captured"},
    {"learner.feed_workers", T::integer, "1", "HostFeed gather threads (0: min(8, cores))", 0, 64},
    {"learner.threads", T::integer, "1", "LibTorch intra-op threads of the learner (CPU training)", 1, 256},
    {"learner.batch_size", T::integer, "128", "samples per optimizer step, across all learner ranks: each of N data-parallel ranks takes batch_size / N (so run.learners changes the speed, not the training)", 1, 1048576},
    {"learner.epochs", T::real, "4", "training length in epochs of the train split (used when learner.steps = 0)", 0.0, 1.0e6},
    {"learner.steps", T::integer, "0", "training length in optimizer steps; 0: learner.epochs", 0, 1.0e12},
    {"learner.seed", T::integer, "0", "seed of the batch order", 0, 9.0e15},
    {"learner.optimizer", T::string, "\"sgd\"", "optimizer", {}, {}, {"sgd", "adam", "adamw"}},
    {"learner.lr", T::real, "0.05", "base learning rate (the schedule scales it)", 0.0, 100.0},
    {"learner.momentum", T::real, "0.9", "SGD momentum", 0.0, 1.0},
    {"learner.nesterov", T::boolean, "true", "SGD Nesterov momentum"},
    {"learner.weight_decay", T::real, "5e-4", "weight decay (L2 for sgd/adam, decoupled for adamw)", 0.0, 10.0},
    {"learner.schedule", T::string, "\"cosine\"", "learning-rate schedule: cosine to learner.min_lr at the last step, step (x gamma every step_size), constant", {}, {}, {"constant", "step", "cosine"}},
    {"learner.warmup_steps", T::integer, "100", "linear warmup steps", 0, 1.0e12},
    {"learner.min_lr", T::real, "0", "cosine floor", 0.0, 100.0},
    {"learner.step_size", T::integer, "1000", "step schedule: steps between decays", 1, 1.0e12},
    {"learner.gamma", T::real, "0.1", "step schedule: decay factor", 0.0, 1.0},
    {"learner.publish_every_steps", T::integer, "50", "publish the weights to the slab every N steps (and at the end); 0 = only by time", 0, 1.0e12},
    {"learner.publish_every_ms", T::real, "0", "also publish when this many ms passed; 0 = off", 0.0, 1.0e9},
    {"learner.publish_bf16", T::boolean, "false", "publish bfloat16 weights (half the bytes)"},
    {"learner.device_slab", T::string, "\"auto\"", "auto: a cuda learner also publishes into a GPU-resident slab (/tandem.<job>.weights.cuda) that cuda actors on the same GPU map through CUDA IPC (a D2D copy, no PCIe); off: host slab only", {}, {}, {"auto", "off"}},
    {"learner.checkpoint_every_steps", T::integer, "500", "write <run_dir>/ckpt-<step>.safetensors every N steps (and at stop and end); 0 = only at stop and end", 0, 1.0e12},
    {"learner.keep_checkpoints", T::integer, "3", "checkpoints kept in the run dir (older ones are deleted)", 1, 1000000},
    {"learner.report_every_steps", T::integer, "20", "steps between metrics reports (loss, accuracy, samples/s) to the control block", 1, 1000000},
    {"learner.algo", T::string, "\"supervised\"", "what the learner optimises: supervised (data.* batches, cross-entropy), or reinforcement learning from the actors' experience rings: ppo (PPO with GAE) or vtrace (IMPALA V-trace actor-critic); RL settings are in [rl]", {}, {}, {"supervised", "ppo", "vtrace"}},
    {"learner.rendezvous_timeout_s", T::real, "60", "data-parallel ranks: how long rank 0's store waits for every rank to arrive before all exit naming the missing ones", 1.0, 86400.0},
    {"learner.cpu_collectives", T::string, "\"shm\"", "data-parallel CPU ranks that all share one node: shm reduces through a shared-memory segment (/tandem.<job>.reduce-<pid>, unlinked once every rank mapped it); gloo goes through Gloo over TCP loopback. Ranks on several nodes always use Gloo", {}, {}, {"shm", "gloo"}},
    {"learner.shm_progress", T::string, "\"auto\"", "data-parallel CPU ranks reducing through shared memory: thread = a thread per rank runs the collectives while backward goes on (pays where the node has cores to spare); caller = the training thread does (its autograd hooks hand each bucket over, the step's end sums with whichever rank is idle; no hand-off between threads: better where the ranks' threads fill the cores); auto = caller when local ranks x learner.threads >= the CPUs the learner may run on, else thread", {}, {}, {"auto", "thread", "caller"}},
    {"learner.cpu_affinity", T::string, "\"auto\"", "data-parallel CPU ranks: auto = where the node's ranks x learner.threads equal the CPUs the learner may run on, each rank keeps to its own learner.threads of them (steadier steps, docs/DATA_PARALLEL.md); none = the scheduler places them", {}, {}, {"auto", "none"}},
    {"learner.collective_timeout_s", T::real, "30", "data-parallel ranks: a collective (all-reduce, broadcast, stop agreement) that takes longer fails the rank; a dead or hung peer then ends the job instead of hanging it", 1.0, 86400.0},
    {"learner.bucket_first_mb", T::real, "0.5", "data-parallel ranks: size of the first gradient bucket in MiB (the last layers' gradients, ready first, so communication starts early; 0.5 keeps the last layers of a small model apart from the rest, docs/DATA_PARALLEL.md)", 0.0625, 4096.0},
    {"learner.bucket_mb", T::real, "25", "data-parallel ranks: size of the other gradient buckets in MiB", 0.0625, 4096.0},
};

const std::vector<ConfigKey> kActor = {
    {"actor.role", T::string, "\"evaluator\"", "what the actors do: evaluator = evaluate each new weight version (on data.test_split; with learner.algo ppo/vtrace: greedy episodes of env.name); rollout = step env.envs environments with the latest policy and write experience to the learner", {}, {}, {"evaluator", "rollout"}},
    {"actor.evaluators", T::integer, "0", "with actor.role = \"rollout\": how many of run.actors are RL evaluators instead (the last ones)", 0, 4096},
    {"actor.eval_episodes", T::integer, "10", "RL evaluator: greedy episodes per evaluated version, on seeds of its own", 1, 1000000},
    {"actor.device", T::string, "\"cpu\"", "where the actor runs its model", {}, {}, {"cpu", "cuda"}},
    {"actor.cuda_graph", T::boolean, "false", "evaluator on cuda: capture the forward and the loss/correct sums of one batch in a CUDA graph and replay it for every full batch (results bitwise equal to eager); the last partial batch, a CPU actor and TorchScript models run eagerly"},
    {"actor.threads", T::integer, "1", "LibTorch intra-op threads of each actor", 1, 256},
    {"actor.batch_size", T::integer, "1000", "evaluation batch size", 1, 1048576},
    {"actor.max_samples", T::integer, "0", "evaluate the first N test samples only; 0 = the whole split", 0, 1.0e12},
    {"actor.min_interval_s", T::real, "20", "evaluate at most this often (the newest version wins); the final version is always evaluated", 0.0, 86400.0},
    {"actor.wait_weights_s", T::real, "300", "how long to wait for the learner's weight slab to appear", 0.0, 86400.0},
};

const std::vector<ConfigKey> kEnv = {
    {"env.name", T::string, "\"cartpole\"", "environment: cartpole (CartPole-v1), acrobot (Acrobot-v1), mountaincar (MountainCar-v0), pendulum (Pendulum-v1), null (no dynamics, for overhead figures), plugin (env.plugin)", {}, {}, {"cartpole", "acrobot", "mountaincar", "pendulum", "null", "plugin"}},
    {"env.plugin", T::string, "\"\"", "with env.name = \"plugin\": path of a shared library implementing envs/tandem_env.h"},
    {"env.envs", T::integer, "8", "environments per rollout actor, stepped together (the policy runs batched over them)", 1, 65536},
    {"env.seed", T::integer, "0", "job seed: env e of actor a is seeded from (env.seed, a, e); evaluators use seeds of their own", 0, 9.0e15},
};

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
    {"rl.ent_coef", T::real, "0.01", "entropy bonus coefficient", 0.0, 100.0},
    {"rl.vf_coef", T::real, "0.5", "value loss coefficient", 0.0, 100.0},
    {"rl.max_grad_norm", T::real, "0.5", "clip the global gradient norm to this; 0 = off", 0.0, 1.0e6},
    {"rl.rho_bar", T::real, "1.0", "V-trace: truncation of the importance weights in the value targets", 0.0, 1.0e6},
    {"rl.c_bar", T::real, "1.0", "V-trace: truncation of the trace-cutting coefficients", 0.0, 1.0e6},
    {"rl.anneal_lr", T::boolean, "true", "decay learner.lr linearly to 0 over rl.total_env_steps"},
};

}  // namespace

std::span<const ConfigKey> data_keys() { return kData; }
std::span<const ConfigKey> env_keys() { return kEnv; }
std::span<const ConfigKey> rl_keys() { return kRl; }
std::span<const ConfigKey> model_keys() { return kModel; }
std::span<const ConfigKey> learner_keys() { return kLearner; }
std::span<const ConfigKey> actor_keys() { return kActor; }

std::vector<ConfigKey> program_schema() {
  std::vector<ConfigKey> keys;
  for (auto t : {data_keys(), model_keys(), learner_keys(), actor_keys(), env_keys(), rl_keys()}) keys.insert(keys.end(), t.begin(), t.end());
  return keys;
}

std::vector<double> parse_number_list(const std::string& key, const std::string& text) {
  std::vector<double> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    const char* begin = item.c_str();
    char* end = nullptr;
    const double v = std::strtod(begin, &end);
    while (end && (*end == ' ' || *end == '\t')) ++end;
    if (end == begin || *end != '\0')
      fail("config: {} = \"{}\" is not a list of numbers: write e.g. \"0.5\" or \"0.49,0.48,0.45\"", key, text);
    if (!std::isfinite(v))
      fail("config: {} = \"{}\" holds {}: write finite numbers, e.g. \"0.5\" or \"0.49,0.48,0.45\"", key, text, v);
    out.push_back(v);
  }
  if (out.empty()) fail("config: {} is empty: write e.g. \"0.5\" or \"0.49,0.48,0.45\"", key);
  return out;
}

}  // namespace tandem
