// Waiting for the learner's segments: an actor may start before the learner has created them.
// Each waits up to `wait_s` (actor.wait_weights_s) for the segment to appear, then retries the
// attach until it succeeds (the creator may still be writing it) or wait_s has passed, when the
// last attach error (a signature or shape mismatch, say) is thrown. A stop request ends the wait
// with nullopt: the actor then exits 0 at once, as it does when stopped later, since a stop asked
// for during start-up is no failure. `ctx.tick` is called while waiting, so a waiting actor is not
// taken for hung.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "actor/actor_context.hpp"
#include "actor/follower.hpp"
#include "common/torch/flat_params.hpp"
#include "shm/experience_ring.hpp"

namespace tandem::actor {

std::optional<Follower> wait_for_follower(const std::string& slab, FlatParams& flat, const std::string& model,
                                          double wait_s, const ActorContext& ctx);

std::optional<shm::ExperienceWriter> wait_for_rings(const ActorContext& ctx, double wait_s);

}  // namespace tandem::actor
