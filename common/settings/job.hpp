// A job's settings: every table the programs `tandem run` starts read, typed (JobSettings), and the
// rules between tables, checked by one function that the launcher calls before it starts anything
// and every program calls at start, so the two cannot disagree. A rule that needs the dataset cache
// is shm/dataset_check.hpp's; one that needs LibTorch (a GPU to be there) is the program's.
//
// The tables: [data], [model] (data.hpp); [learner], [publish], [checkpoint], [ddp] (learner.hpp);
// [supervised], [optimizer], [schedule] (training.hpp); [actor], [env], [rl] (actor.hpp). The
// launcher's own [run] is tools/run/job_config.hpp's. Each key is read as a literal only in the
// parse() of its table's struct (tools/dev/check-house holds everything else to that).
// Torch-free; JobSettings is immutable after parse() and may be read from any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/config.hpp"
#include "common/settings/actor.hpp"
#include "common/settings/data.hpp"
#include "common/settings/learner.hpp"
#include "common/settings/training.hpp"

namespace tandem {

// Where the job's processes sit: what [run] and `tandem run`'s flags decide. The launcher knows it
// from its config; a program from the variables the launcher (or torchrun) sets.
struct JobShape {
  std::uint32_t learners = 1;             // learner ranks, every node's (WORLD_SIZE)
  std::uint32_t local_learners = 1;       // this node's
  std::optional<std::uint32_t> actors{};  // this node's run.actors; unknown to a learner started by hand
  bool deterministic = false;             // run.deterministic
};

struct JobSettings {
  DataSettings data;
  ModelSettings model;
  LearnerSettings learner;
  SupervisedSettings supervised;
  OptimizerSettings optimizer;
  ScheduleSettings schedule;
  PublishSettings publish;
  CheckpointSettings checkpoint;
  DdpSettings ddp;
  ActorSettings actor;
  EnvSettings env;
  RlSettings rl;
  JobShape shape;
  // RL: the rollout actors (R), one experience ring each: run.actors minus actor.evaluators, or 1
  // for a learner started by hand. 0 in a supervised job.
  std::uint32_t rollout_actors = 0;

  // Every table, then every rule between tables and the shape; the first broken one is a UserError
  // line naming the keys and the fix.
  static JobSettings parse(const Config& config, const JobShape& shape);

  // Deterministic RL: the slots each update takes from every rollout actor (k = slots_per_update / R).
  std::uint32_t slots_per_actor() const { return rl.slots_per_update / rollout_actors; }
};

// A supervised run's length, from the number of samples in its train split: what the launcher
// checks before anything starts and what the learner trains for, one computation. Each of the
// shape's W ranks takes supervised.batch_size / W samples a step from its floor(N / W)-sample shard
// (learner/feed/epoch_sampler.hpp: the last short batch of an epoch is dropped).
struct SupervisedBudget {
  std::uint64_t rank_batch = 0;  // samples a rank takes per step
  std::uint64_t steps_per_epoch = 0;
  std::int64_t total_steps = 0;
};
SupervisedBudget supervised_budget(const JobSettings& settings, const std::string& split, std::uint64_t samples);

// data + model + learner + publish + checkpoint + ddp + supervised + optimizer + schedule + actor +
// env + rl: what a child's job.toml may hold.
std::vector<ConfigKey> program_schema();

// The keys that moved to a table of their own in this release; their old spellings load, with a
// note naming the new key, until the next.
std::span<const RenamedKey> renamed_keys();

}  // namespace tandem
