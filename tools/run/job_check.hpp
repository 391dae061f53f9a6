// What `tandem run` checks of the programs' keys before it creates a run directory or spawns
// anything, so that a job whose learner or actors could only fail at start is one line naming the
// key instead of a run dir, a crash loop and a LibTorch backtrace. The config layer already checked
// every key's type and range; this checks what needs the world: the model name (a built-in, or a
// file that is a zip archive, as TorchScript files are: the launcher does not link LibTorch), the
// dataset cache (attaches, holds x as uint8 images and y as int64 labels), the splits (exist, bounds
// within the cache), every label of the used splits within model.num_classes, data.mean / data.std,
// batch sizes within their split and the step budget. An RL job (learner.algo = "ppo" | "vtrace")
// reads no dataset: it needs rollout actors (actor.role = "rollout", actor.evaluators below
// run.actors), a model with a value head, env.plugin exactly when env.name = "plugin" (an existing
// file), and in deterministic mode rl.slots_per_update a multiple of the rollout actors.
//
// Threads: main's, before anything starts. Attaches the cache read-only and detaches it again: it
// creates nothing in /dev/shm.
#pragma once

#include <cstdint>

#include "common/config.hpp"

namespace tandem::run {

// Throws a UserError naming the key and the fix on the first problem found.
void check_job_inputs(const Config& config, std::uint32_t learners);  // learners: all ranks, every node

// How many of run.actors are rollout actors (the first ones); they owe no evaluation of the final
// version, unlike every other actor.
std::uint32_t rollout_actor_count(const Config& config);

}  // namespace tandem::run
