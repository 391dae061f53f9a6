// The RL learner (learner.algo = "ppo" | "vtrace"): tandem-learner runs it instead of the supervised
// loop. It creates /tandem.<job>.exp with one ring per rollout actor (rl_setup.hpp), publishes the
// initial weights, then repeats: gather rl.slots_per_update verified slots (slot_gather.hpp), scale
// their rewards (rl.norm_reward) and fold their observations into the model's statistics (rl.norm_obs;
// normalizers.hpp), one update (update.hpp), release the slots, publish the new weights. Policy lag (the learner's version
// minus each slot's behaviour version), env steps, the mean return and length of the last 100
// finished training episodes, the loss and the shares of the time in updates and waiting for slots go
// to the control block after every update.
//
// It finishes (exit 0, final publish, final checkpoint) when it has consumed rl.total_env_steps, or
// with rl.stop_on_return once the 100-episode mean reaches rl.stop_return, logging
//   solved: mean return X over the last 100 episodes at env step N, T s
// (T: seconds since the learner started; benchmarks parse this line). A stop request (launcher, SIGINT,
// SIGTERM) checkpoints and exits 0 too. A start resumes from the run dir's newest checkpoint: the
// model, Adam's state, the update count, the env steps and the weight versions continue.
//
// Learner ranks (run.learners = N, one node): rank r consumes the rings of rollout actors
// [r R/N, (r+1) R/N) and gathers rl.slots_per_update / N slots an update; the gradients of every
// minibatch are averaged across the ranks (ddp/grad_sync.hpp, NCCL on GPUs, the node group on CPUs)
// before they are clipped, so the replicas stay equal and N ranks learn as one rank would from the
// union of their batches (exactly, where the loss is a mean over independent columns: V-trace, and PPO
// without advantage normalisation). Rank 0 makes the rings, publishes, checkpoints, judges "solved"
// on its own actors' episodes and, with rl.norm_obs, keeps the observation statistics from its own
// batches; the ranks agree after every gather whether to stop (a stop request, the budget, solved), so
// they stop after the same update. Env steps count every rank's; episodes and lag are each rank's own.
// A checkpoint holds rank 0's reward scales (rl.norm_reward): after a resume the other ranks' actors
// start theirs afresh.
//
// Deterministic mode (TANDEM_DETERMINISTIC=1): one LibTorch thread, seeded minibatch order, slots in a
// fixed order (k = slots_per_update / R per actor per update), every publish committed. Actor a acts
// its n-th slot with version first_version + floor(n / k), first_version being the first published.
#pragma once

#include "common/settings/job.hpp"
#include "learner/ddp/rank_env.hpp"
#include "shm/job_process.hpp"

namespace tandem {

int run_rl_learner(const JobSettings& settings, shm::JobProcess& process, const ddp::RankInfo& rank = {});

}  // namespace tandem
