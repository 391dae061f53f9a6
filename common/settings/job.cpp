#include "common/settings/job.hpp"

#include <algorithm>
#include <cmath>

#include "common/error.hpp"

namespace tandem {
namespace {

const RenamedKey kRenamed[] = {
    {"learner.batch_size", "supervised.batch_size"},
    {"learner.epochs", "supervised.epochs"},
    {"learner.steps", "supervised.steps"},
    {"learner.feed", "supervised.feed"},
    {"learner.feed_workers", "supervised.feed_workers"},
    {"learner.optimizer", "optimizer.name"},
    {"learner.lr", "optimizer.lr"},
    {"learner.momentum", "optimizer.momentum"},
    {"learner.nesterov", "optimizer.nesterov"},
    {"learner.weight_decay", "optimizer.weight_decay"},
    {"learner.schedule", "schedule.name"},
    {"learner.warmup_steps", "schedule.warmup_steps"},
    {"learner.min_lr", "schedule.min_lr"},
    {"learner.step_size", "schedule.decay_every_steps"},
    {"learner.gamma", "schedule.decay_factor"},
    {"learner.publish_every_steps", "publish.every_steps"},
    {"learner.publish_every_ms", "publish.every_ms"},
    {"learner.publish_bf16", "publish.bf16"},
    {"learner.device_slab", "publish.device_slab"},
    {"learner.checkpoint_every_steps", "checkpoint.every_steps"},
    {"learner.keep_checkpoints", "checkpoint.keep"},
    {"learner.rendezvous_timeout_s", "ddp.rendezvous_timeout_s"},
    {"learner.collective_timeout_s", "ddp.collective_timeout_s"},
    {"learner.cpu_collectives", "ddp.cpu_collectives"},
    {"learner.shm_progress", "ddp.shm_progress"},
    {"learner.cpu_affinity", "ddp.cpu_affinity"},
    {"learner.bucket_first_mb", "ddp.bucket_first_mb"},
    {"learner.bucket_mb", "ddp.bucket_mb"},
};

void check_supervised(const JobSettings& s) {
  // Unknown to a program started by hand: there may be actors.
  if (s.actor.role == ActorSettings::Role::rollout && s.shape.actors.value_or(1) > 0)
    fail(
        "config: actor.role = \"rollout\" needs a learner that learns from experience: set learner.algo = \"ppo\" "
        "or \"vtrace\"");
  if (s.supervised.feed == SupervisedSettings::Feed::device && !s.learner.device.cuda)
    fail("config: supervised.feed = \"device\" needs learner.device = \"cuda\": use supervised.feed = \"host\"");
  const std::uint64_t batch = s.supervised.batch_size, ranks = s.shape.learners;
  if (batch % ranks != 0)
    fail(
        "config: supervised.batch_size = {} does not divide among the {} learner ranks (it counts one step's "
        "samples across all ranks): use a multiple of {}",
        batch, ranks, ranks);
}

// Rings, slots and minibatches that fit together; the learner holds every slot of an update until
// the update has used it (zero-copy), so the rings must hold them all at once, or learner and
// actors would wait for each other forever.
void check_rl_batches(const JobSettings& s) {
  const RlSettings& rl = s.rl;
  const std::uint64_t R = s.rollout_actors;
  if (s.shape.deterministic) {
    if (rl.slots_per_update % R != 0)
      fail(
          "config: run.deterministic needs rl.slots_per_update = {} to be a multiple of the {} rollout actors: set "
          "it to {}",
          rl.slots_per_update, R, std::max<std::uint64_t>(R, rl.slots_per_update / R * R));
    if (s.slots_per_actor() > rl.slots_per_ring)
      fail(
          "config: run.deterministic: each update takes {} slots from every actor but rl.slots_per_ring = {}: set "
          "rl.slots_per_ring to at least {}",
          s.slots_per_actor(), rl.slots_per_ring, s.slots_per_actor());
  } else if (rl.slots_per_update > R * rl.slots_per_ring) {
    fail(
        "config: rl.slots_per_update = {} is more than the {} rings x rl.slots_per_ring = {} can hold: raise "
        "rl.slots_per_ring or lower rl.slots_per_update",
        rl.slots_per_update, R, rl.slots_per_ring);
  }
  const bool ppo = s.learner.algo == Algo::ppo;
  // Each learner rank splits its own share of the update (check_rl_ranks makes it whole).
  const std::uint64_t columns = std::uint64_t{rl.slots_per_update} / s.shape.learners *
                                static_cast<std::uint64_t>(s.env.envs);
  const std::uint64_t split = ppo ? columns * rl.rollout_steps : columns;  // V-trace keeps whole trajectories
  if (static_cast<std::uint64_t>(rl.minibatches) > split)
    fail("config: rl.minibatches = {} is more than the {} {} of one update: lower rl.minibatches", rl.minibatches,
         split, ppo ? "samples" : "trajectories (V-trace splits by trajectory)");
  if (!ppo && (rl.norm_value || rl.kl_coef > 0 || rl.kl_target > 0 || rl.ppo_targets != RlSettings::Targets::gae))
    fail(
        "config: rl.norm_value, rl.kl_coef, rl.kl_target and rl.ppo_targets are PPO's, but learner.algo = "
        "\"vtrace\": set learner.algo = \"ppo\" (rl.ppo_targets = \"vtrace\" is PPO on V-trace targets), or remove them");
  if (rl.kl_target > 0 && rl.anneal_lr)
    fail(
        "config: rl.kl_target = {} and rl.anneal_lr = true both set the learning rate: set rl.anneal_lr = false to "
        "follow the KL, or rl.kl_target = 0 to anneal",
        rl.kl_target);
}

// RL learner ranks: each consumes the rings of its own rollout actors, so the actors and the slots of
// an update divide among them, and the rings are one node's shared memory.
void check_rl_ranks(const JobSettings& s, std::string_view algo) {
  const std::uint32_t N = s.shape.learners;
  if (N == 1) return;
  if (s.shape.local_learners != N)
    fail(
        "config: learner.algo = \"{}\" runs its {} learner ranks on one node (the rollout actors' rings are its "
        "shared memory), not {} of them here: start every rank on one node",
        algo, N, s.shape.local_learners);
  if (s.shape.deterministic)
    fail("config: run.deterministic runs one RL learner rank, not {}: set run.learners = 1", N);
  if (s.rollout_actors % N != 0)
    fail(
        "config: the {} rollout actors do not divide among run.learners = {} ranks (each consumes its own actors' "
        "rings): make run.actors - actor.evaluators a multiple of {}",
        s.rollout_actors, N, N);
  if (s.rl.slots_per_update % N != 0)
    fail(
        "config: rl.slots_per_update = {} does not divide among run.learners = {} ranks (each gathers its share of "
        "an update): set it to a multiple of {}",
        s.rl.slots_per_update, N, N);
}

// An RL job: learner ranks, rollout actors, an actor-critic; no dataset cache.
void check_rl(JobSettings& s) {
  const std::string_view algo = algo_name(s.learner.algo);
  if (s.shape.actors) {
    const std::uint32_t actors = *s.shape.actors;
    if (s.actor.role != ActorSettings::Role::rollout)
      fail(
          "config: learner.algo = \"{}\" learns from rollout actors: set actor.role = \"rollout\" "
          "(actor.evaluators of them evaluate)",
          algo);
    if (s.actor.evaluators >= actors)
      fail(
          "config: actor.evaluators = {} leaves no rollout actor among run.actors = {}: raise run.actors or lower "
          "actor.evaluators",
          s.actor.evaluators, actors);
    s.rollout_actors = actors - s.actor.evaluators;
  } else {
    s.rollout_actors = 1;  // started by hand: one ring
  }
  // A Python env is stepped only by the Python rollout actor (tandem.rollout_actor), which runs
  // actor_critic_mlp in PyTorch (same parameter names and shapes) and has no lockstep; the C++ RL evaluator cannot play it.
  if (s.env.is_python() && (s.actor.evaluators > 0 || s.shape.deterministic || s.model.name != "actor_critic_mlp"))
    fail(
        "config: env.name = \"python\" runs Python rollout actors only, with model.name = \"actor_critic_mlp\" and "
        "run.deterministic = false: set actor.evaluators = 0 (now {}), run.deterministic = false, model.name = "
        "\"actor_critic_mlp\"",
        s.actor.evaluators);
  if (s.model.builtin() && s.model.name != "actor_critic_mlp" && s.model.name != "actor_critic_cnn")
    fail(
        "config: model.name = \"{}\" has no value head: learner.algo = \"{}\" needs \"actor_critic_mlp\", "
        "\"actor_critic_cnn\" (image observations) or a TorchScript actor-critic returning (params, value)",
        s.model.name, algo);
  if (s.rl.norm_obs && s.model.name != "actor_critic_mlp")
    fail(
        "config: rl.norm_obs = true normalises inside actor_critic_mlp, not model.name = \"{}\": set model.name = "
        "\"actor_critic_mlp\", or rl.norm_obs = false and normalise in your model",
        s.model.name);
  if (s.env.is_python() && (s.model.hidden != 64 || s.model.shared_trunk))
    fail(
        "config: env.name = \"python\" plays actor_critic_mlp's default layout in PyTorch (tandem.rollout_actor): set "
        "model.hidden = 64 (now {}) and model.shared_trunk = false",
        s.model.hidden);
  if (s.rl.norm_obs && s.env.is_python())
    fail(
        "config: rl.norm_obs = true is not offered with env.name = \"python\" (the Python rollout actor's network "
        "does not normalise): set rl.norm_obs = false");
  check_rl_ranks(s, algo);
  check_rl_batches(s);
}

}  // namespace

JobSettings JobSettings::parse(const Config& c, const JobShape& shape) {
  JobSettings s{.data = DataSettings::parse(c),
                .model = ModelSettings::parse(c),
                .learner = LearnerSettings::parse(c),
                .supervised = SupervisedSettings::parse(c),
                .optimizer = OptimizerSettings::parse(c),
                .schedule = ScheduleSettings::parse(c),
                .publish = PublishSettings::parse(c),
                .checkpoint = CheckpointSettings::parse(c),
                .ddp = DdpSettings::parse(c),
                .actor = ActorSettings::parse(c),
                .env = EnvSettings::parse(c),
                .rl = RlSettings::parse(c),
                .shape = shape};
  if (s.learner.device.index >= 0 && shape.local_learners > 1)
    fail(
        "config: learner.device = \"{}\" names one GPU for this node's {} learner ranks: use \"cuda\" (local rank "
        "r trains on GPU r)",
        s.learner.device.str(), shape.local_learners);
  if (!s.model.package.empty() && !s.actor.device.cuda)
    fail("config: model.package runs on a GPU: set actor.device = \"cuda\", or leave model.package empty");
  if (s.learner.rl()) check_rl(s);
  else check_supervised(s);
  return s;
}

SupervisedBudget supervised_budget(const JobSettings& s, const std::string& split, std::uint64_t samples) {
  const std::uint64_t ranks = s.shape.learners;
  SupervisedBudget b{.rank_batch = s.supervised.batch_size / ranks};
  const std::uint64_t shard = samples / ranks;
  if (b.rank_batch > shard)
    fail("config: supervised.batch_size = {} is larger than split '{}' ({} samples): lower it", s.supervised.batch_size,
         split, samples);
  b.steps_per_epoch = shard / b.rank_batch;
  b.total_steps = s.supervised.steps;
  if (b.total_steps == 0) {
    b.total_steps = std::llround(s.supervised.epochs * static_cast<double>(b.steps_per_epoch));
    if (b.total_steps <= 0)
      fail("config: supervised.epochs = {} gives no step ({} per epoch): raise it or set supervised.steps",
           s.supervised.epochs, b.steps_per_epoch);
  }
  if (s.schedule.name == "cosine" && s.schedule.warmup_steps >= b.total_steps)
    fail("config: schedule.warmup_steps = {} is not below the run's {} steps: lower it or train longer",
         s.schedule.warmup_steps, b.total_steps);
  return b;
}

std::vector<ConfigKey> program_schema() {
  std::vector<ConfigKey> keys;
  for (auto table :
       {DataSettings::keys(), ModelSettings::keys(), LearnerSettings::keys(), SupervisedSettings::keys(),
        OptimizerSettings::keys(), ScheduleSettings::keys(), PublishSettings::keys(), CheckpointSettings::keys(),
        DdpSettings::keys(), ActorSettings::keys(), EnvSettings::keys(), RlSettings::keys()})
    keys.insert(keys.end(), table.begin(), table.end());
  return keys;
}

std::span<const RenamedKey> renamed_keys() { return kRenamed; }

}  // namespace tandem
