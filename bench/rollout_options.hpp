// `tandem-bench rollout`: how fast experience moves, three ways, in one run.
//  (a) rings (rollout_rings.cpp): null envs, no network. Actor threads step a VecEnv of E null envs
//      and write T x E slots into an experience ring (ExperienceWriter); one consumer thread peeks,
//      verifies (checksum) and releases every slot, as the learner does. Steps/s per actor core =
//      steps committed / the actor threads' CPU seconds, so a busy shared machine does not count.
//  (b) job (rollout_job.cpp): the real thing, `tandem run` of CartPole jobs with the 64x64
//      actor_critic_mlp: env steps/s the learner consumes (its env_steps_per_s in metrics.jsonl) with
//      PPO (CleanRL's update: 4 epochs x 4 minibatches) and with V-trace (IMPALA's: each sample learned
//      from once), and time-to-solve of the example config (wall seconds of `tandem run` with
//      rl.stop_on_return).
//  (c) peers (rollout_cmd.cpp): bench/peers/cleanrl_ppo_peer.py and mp_actor_learner_peer.py in the
//      same run: their env steps/s and time-to-solve, and ours / theirs.
#pragma once

#include <cstdint>
#include <string>

#include "bench/bench_json.hpp"

namespace tandem::bench {

struct RolloutBenchOptions {
  // (a)
  std::uint32_t envs = 256;  // E null envs per actor: 1.1 MB slots stay in cache (docs/results/HISTORY.md)
  std::uint32_t steps = 64;  // T steps per slot
  std::uint32_t slots = 4;   // slots per ring
  std::uint32_t actors = 1;  // actor threads, one ring each
  double seconds = 3.0;      // measurement time of (a)
  // (b)
  bool no_job = false;
  std::string tandem;                 // the tandem launcher; empty: next to this binary
  std::string config;                 // time-to-solve config; empty: examples/cartpole-ppo.toml
  std::uint64_t job_steps = 1000000;  // rl.total_env_steps of the throughput job
  std::uint32_t job_actors = 2;
  std::uint32_t job_learners = 1;  // run.learners of the throughput job: ranks, each on its own actors
  std::string job_device = "cpu";  // learner.device of the throughput job (cuda: rank r on GPU r)
  bool job_cuda_graph = false;     // learner.cuda_graph of the throughput job
  std::uint32_t job_slots = 0;     // rl.slots_per_update; 0: one per learner rank
  std::uint32_t job_envs = 32;
  std::uint32_t job_rollout_steps = 64;
  std::string job_algo = "both";      // learner.algo of the throughput job: ppo, vtrace or both
  std::uint32_t job_epochs = 0;       // rl.update_epochs; 0: the algorithm's recipe (PPO 4, V-trace 1)
  std::uint32_t job_minibatches = 0;  // rl.minibatches; 0: the algorithm's recipe (PPO 4, V-trace 1)
  std::uint32_t seeds = 1;            // time-to-solve runs (env.seed 0..seeds-1); the median is reported
  // (c)
  bool peer = false;
  std::string python = "python3";
  std::uint64_t peer_steps = 500000;  // the peers' step budget (CleanRL's total_timesteps)
  std::string json;
};

// (a): the table rows printed, the figures returned for the JSON line.
Json measure_rings(const RolloutBenchOptions& options);
// (b): runs `tandem run` twice or more; fails with one line naming the job and its log when a job fails.
Json measure_job(const RolloutBenchOptions& options);

}  // namespace tandem::bench
