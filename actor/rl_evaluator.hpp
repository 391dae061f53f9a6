// The RL evaluator: actor.role = "evaluator" in a job with learner.algo = "ppo" | "vtrace", or one of
// the last actor.evaluators actors of a rollout job. It follows the weight slab and, for each new
// version (at most every actor.min_interval_s, the newest version winning), plays actor.eval_episodes
// greedy episodes (PolicyHead::greedy) of the job's env. Each evaluation starts from the same seeds,
// env_seed(eval_seed(env.seed), index, e) (envs/seeds.hpp): its own, never a rollout actor's, and the
// same for every version and restart, so versions are compared on equal episodes. Results go to the
// control block (step = evaluations, version, episode_return and episode_length = means, seconds) and
// as a JSON line to <run_dir>/eval.jsonl: job, actor, version, step, episode_return (mean),
// episode_return_min, episode_return_max, episode_length (mean), episodes, seconds, unix_s. On a
// stop it evaluates the final version unless the job failed: that is its duty, which the launcher
// checks (tools/run/exit_policy.hpp unmet_duty) before it calls the job a success; a stop signal abandons
// that last evaluation.
#pragma once

#include <cstdint>
#include <functional>

#include "actor/actor_context.hpp"
#include "common/settings/job.hpp"
#include "common/torch/models.hpp"
#include "common/torch/policy.hpp"
#include "common/torch/rl_model.hpp"
#include "envs/env_source.hpp"

namespace tandem::actor {

struct EpisodeStats {
  bool complete = true;  // false: abandoned; nothing to report
  std::int64_t episodes = 0;
  double return_mean = 0, return_min = 0, return_max = 0, length_mean = 0;
  double seconds = 0;
};

// Plays `episodes` greedy episodes over up to 64 envs, VecEnv-seeded from (job_seed, actor_index):
// env e plays its share of them from its first episode on. `abandon` is asked before each step.
EpisodeStats play_greedy(Model& model, const PolicyHead& head, const envs::EnvSource& source, std::int64_t episodes,
                         std::uint64_t job_seed, std::uint32_t actor_index, const std::function<bool()>& abandon = {});

int run_rl_evaluator(const JobSettings& settings, const ActorContext& ctx);

}  // namespace tandem::actor
