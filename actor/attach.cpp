#include "actor/attach.hpp"

#include <chrono>
#include <functional>
#include <thread>

#include "common/clock.hpp"
#include "common/error.hpp"
#include "shm/segment.hpp"

namespace tandem::actor {
namespace {

using Clock = std::chrono::steady_clock;

template <class Attach>
auto wait_and_attach(const std::string& segment, const char* what, double wait_s, const ActorContext& ctx,
                     Attach attach) {
  const auto t0 = Clock::now();
  while (!shm::Segment::exists(segment)) {
    if (ctx.stopping()) fail("stopped while waiting for the {} /{}", what, segment);
    if (seconds_since(t0) > wait_s)
      fail(ErrorKind::segment_not_found,
           "the {} /{} did not appear within actor.wait_weights_s = {} s: is the learner running?", what, segment,
           wait_s);
    ctx.beat();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  for (;;) {  // it exists, but may not be ready yet
    try {
      return attach();
    } catch (const UserError&) {
      if (seconds_since(t0) > wait_s || ctx.stopping()) throw;
      ctx.beat();
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
}

}  // namespace

Follower wait_for_follower(const std::string& slab, FlatParams& flat, const std::string& model, double wait_s,
                           const ActorContext& ctx) {
  return wait_and_attach(slab, "weight slab", wait_s, ctx, [&] { return Follower(slab, flat, {.model = model}); });
}

shm::ExperienceWriter wait_for_rings(const ActorContext& ctx, double wait_s) {
  return wait_and_attach(shm::job_segment_name(ctx.job, shm::Kind::experience), "experience rings", wait_s, ctx,
                         [&] { return shm::ExperienceWriter::attach(ctx.job, ctx.index); });
}

}  // namespace tandem::actor
