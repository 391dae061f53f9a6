#include "actor/attach.hpp"

#include <chrono>
#include <functional>
#include <thread>

#include "common/clock.hpp"
#include "common/error.hpp"
#include "common/log.hpp"
#include "shm/segment.hpp"

namespace tandem::actor {
namespace {

using Clock = std::chrono::steady_clock;

// nullopt when a stop came first.
template <class Attach>
auto wait_and_attach(const std::string& segment, const char* what, double wait_s, const ActorContext& ctx,
                     Attach attach) -> std::optional<decltype(attach())> {
  const auto t0 = Clock::now();
  auto stopped = [&] {
    if (!ctx.stopping()) return false;
    log::info("stop requested while waiting for the {} /{}: exiting", what, segment);
    return true;
  };
  while (!shm::Segment::exists(segment)) {
    if (stopped()) return std::nullopt;
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
      if (stopped()) return std::nullopt;
      if (seconds_since(t0) > wait_s) throw;
      ctx.beat();
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
}

}  // namespace

std::optional<Follower> wait_for_follower(const std::string& slab, FlatParams& flat, const std::string& model,
                                          double wait_s, const ActorContext& ctx) {
  return wait_and_attach(slab, "weight slab", wait_s, ctx, [&] { return Follower(slab, flat, {.model = model}); });
}

std::optional<shm::ExperienceWriter> wait_for_rings(const ActorContext& ctx, double wait_s) {
  return wait_and_attach(shm::job_segment_name(ctx.job, shm::Kind::experience), "experience rings", wait_s, ctx,
                         [&] { return shm::ExperienceWriter::attach(ctx.job, ctx.index); });
}

}  // namespace tandem::actor
