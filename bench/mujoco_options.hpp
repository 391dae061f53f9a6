// `tandem-bench mujoco`: env steps/s of VecEnv over the MuJoCo locomotion tasks on K threads, against a
// bare loop on one core over the same envs' own mjData: ctrl written straight from the same actions
// (mapped onto ctrlrange before the loop), frame_skip mj_step calls, the step's after-physics work
// (Ant's and Humanoid's mj_rnePostConstraint) and the task's health test, and the env's own reset
// (same seeds, same noise) where an episode ends; no observation, reward, action clipping or VecEnv
// bookkeeping. Both loops therefore follow the same trajectories and end each episode at the same
// step, so the difference is the engine's: one core's overhead = bare rate / VecEnv K=1 rate - 1,
// compared per CPU second (so a busy machine does not count); thread scaling = VecEnv K rate / K=1
// rate, per wall second.
// The rows of a task are measured in turn, `rounds` times, and each figure is the best of its rounds:
// another process on the machine (or on a hyperthread's sibling) only ever slows a round down. The
// overhead the goal is judged on is measured apart, paired: both loops in alternating turns of a
// few steps (measure_paired_overhead), which a busy machine slows alike. The ceiling of K threads is
// K bare loops over E/K envs each, one per thread, run at once and never waiting on each other: what
// the host itself gives K threads (cores that share caches, memory bandwidth or a clock give less
// than K times one), against which VecEnv's K-thread rate shows what its own synchronisation costs.
// With --batch M, AsyncVecEnv (EnvPool's async mode) runs beside them on the same K: its K workers
// step whichever envs are queued, never waiting on each other, the caller's thread receiving batches.
#pragma once

#include <string>
#include <vector>

#include "bench/bench_json.hpp"

namespace tandem::bench {

struct MujocoBenchOptions {
  std::vector<std::string> tasks{"Hopper", "HalfCheetah", "Ant"};
  int envs = 16;                   // E envs in the VecEnv and in the bare loop
  std::vector<int> threads{1, 2};  // VecEnv thread counts K
  int batch = 0;                   // > 0: also AsyncVecEnv on K threads, returning batches of this many envs
  double seconds = 1.0;            // measured per row and round, after a 0.2 s warm-up
  int rounds = 3;                  // rows measured in turn this often; each figure is its best round
  std::string json;
};

struct LoopRate {
  double steps_per_s = 0;      // env steps (one env advancing frame_skip physics steps) per wall second
  double steps_per_cpu_s = 0;  // per second of this process's CPU time, all threads
  long steps = 0;              // env steps measured
  long episodes = 0;           // episodes ended in them
  double episodes_per_1k_steps() const { return steps > 0 ? 1000.0 * static_cast<double>(episodes) / steps : 0.0; }
};

// The bare loop, and VecEnv on `threads` threads, over `envs` envs of `task` (mujoco_bench.cpp).
LoopRate measure_bare(const std::string& task, const MujocoBenchOptions& options);
LoopRate measure_vec_env(const std::string& task, int threads, const MujocoBenchOptions& options);
LoopRate measure_bare_ceiling(const std::string& task, int threads, const MujocoBenchOptions& options);
// AsyncVecEnv on `threads` workers over `envs` envs, the caller receiving batches of options.batch and
// sending them straight back (envs/async_vec_env.hpp): the threads never meet.
LoopRate measure_async(const std::string& task, int threads, const MujocoBenchOptions& options);
// The bare loop and VecEnv on one thread in alternating turns of a few steps each, on one thread's
// CPU clock for seconds x rounds in all: VecEnv's CPU time per step over the bare loop's, less 1.
// Both sides see the same interference, so this holds on a busy machine where the best-of-rounds
// rates do not.
double measure_paired_overhead(const std::string& task, const MujocoBenchOptions& options);
int frame_skip_of(const std::string& task);

}  // namespace tandem::bench
