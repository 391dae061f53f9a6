// The rollout actor (actor.role = "rollout", actors 0..R-1 of a job with R = run.actors -
// actor.evaluators): steps env.envs environments with the newest published policy and writes
// trajectory slots into its experience ring, /tandem.<job>.exp ring `index`, until a stop.
//
//  * Attach: waits (actor.wait_weights_s) for the learner's weight slab and rings; a ring whose
//    shapes do not fit this actor's env and model is a one-line UserError.
//  * Each slot: take the slot at head (a full ring is backpressure: the actor sleeps with backoff,
//    begin_write counts full_waits, the heartbeat keeps beating, a stop ends the wait), load the
//    newest version if the slab has one (Follower::update), fill the slot (rollout.hpp), commit.
//    A restarted actor reattaches and continues at head: the slot a killed one was filling is
//    written again from the start.
//  * Seeds: env e of actor a from (env.seed, a, e) (envs/env.hpp); actions from a generator seeded
//    from (env.seed, a). A restart reseeds both from its restart count, so it does not replay.
//  * Deterministic mode (deterministic_mode()): one thread; with k = rl.slots_per_update / R, the
//    actor's n-th slot (ring index n) acts with exactly version first_version + floor(n / k), waiting
//    for it to be the slab's newest. first_version is the newest version when slot 0 is written, so
//    the learner publishes its initial weights before it waits for slots; a restarted actor finds it
//    again from the policy_version of its last committed slot.
//  * Reports (every 0.2 s and at exit): step = slots committed by this ring, version = the acting
//    version, env_steps = slots x T x E, env_steps_per_s, episode_return / length = mean of its last
//    100 finished episodes, policy_lag_avg = slab's newest minus acting version over the slots since
//    the last report, ring_full_waits, and the shares of the time since the last report spent
//    stepping the envs (env_share), in the policy (compute_share) and waiting on a full ring
//    (wait_share).
// Returns 0 after a stop.
#pragma once

#include "actor/actor_context.hpp"
#include "common/settings/job.hpp"

namespace tandem::actor {

int run_rollout_actor(const JobSettings& settings, const ActorContext& ctx);

}  // namespace tandem::actor
