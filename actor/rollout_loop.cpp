#include "actor/rollout_loop.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/utils.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <optional>
#include <thread>

#include "actor/attach.hpp"
#include "actor/rollout.hpp"
#include "common/clock.hpp"
#include "common/error.hpp"
#include "common/log.hpp"
#include "common/torch/model_config.hpp"
#include "common/torch/rl_model.hpp"
#include "envs/env_source.hpp"
#include "envs/seeds.hpp"
#include "envs/vec_env.hpp"

namespace tandem::actor {
namespace {

using Clock = std::chrono::steady_clock;

// Sleeps 10 us, doubling to 1 ms, between polls of something another process will change.
class Backoff {
 public:
  void wait() {
    std::this_thread::sleep_for(std::chrono::microseconds(us_));
    us_ = std::min(us_ * 2, 1000);
  }
  void reset() { us_ = 10; }

 private:
  int us_ = 10;
};

// Deterministic mode's half of the lockstep: ring index n acts with version first + n / k.
class Lockstep {
 public:
  Lockstep(std::uint64_t k, double wait_s) : k_(k), wait_s_(wait_s) {}

  // Loads the version ring index slot.index() must act with; false when a stop came first.
  bool load(Follower& follower, const shm::SlotView& slot, const shm::ExperienceDescriptor& d,
            const ActorContext& ctx) {
    const std::uint64_t n = slot.index();
    if (!first_ && !(first_ = find_first(follower, slot, d, ctx))) return false;
    std::uint64_t target = *first_ + n / k_;
    Backoff backoff;
    for (;;) {
      const std::uint64_t latest = follower.reader().latest_version();
      if (latest > target) {
        // Only a lost first_version gets here (the learner cannot pass a version without this slot).
        log::warn("deterministic mode: slot {} should act with version {} but the slab is at {}: following it", n,
                  target, latest);
        first_ = latest - std::min(latest, n / k_);
        target = latest;
      }
      if (latest == target && follower.version() != target) (void)follower.update();
      if (follower.version() == target) return true;
      if (ctx.stopping()) return false;
      ctx.beat();
      backoff.wait();
    }
  }

 private:
  // Slot 0: the version the learner published first. After a restart: from the last committed slot,
  // when a kill did not tear it (one slot per ring shares it with the slot being written).
  std::optional<std::uint64_t> find_first(const Follower& follower, const shm::SlotView& slot,
                                          const shm::ExperienceDescriptor& d, const ActorContext& ctx) const {
    const std::uint64_t n = slot.index();
    if (n > 0) {
      const std::byte* prev = slot.bytes() - (n % d.slots_per_ring) * d.slot_stride +
                              ((n - 1) % d.slots_per_ring) * d.slot_stride;
      const auto* h = reinterpret_cast<const shm::TrajectoryHeader*>(prev);
      if (h->seq == n - 1 && shm::slot_checksum(prev, d) == h->checksum && h->policy_version >= (n - 1) / k_)
        return h->policy_version - (n - 1) / k_;
    }
    const auto t0 = Clock::now();
    Backoff backoff;
    while (follower.reader().latest_version() == 0) {
      if (ctx.stopping()) return std::nullopt;
      if (seconds_since(t0) > wait_s_)
        fail("deterministic mode: the learner published no weights within actor.wait_weights_s = {} s", wait_s_);
      ctx.beat();
      backoff.wait();
    }
    const std::uint64_t latest = follower.reader().latest_version();
    return latest - std::min(latest, n / k_);
  }

  std::uint64_t k_;
  double wait_s_;
  std::optional<std::uint64_t> first_;
};

// What the actor reports: totals from its ring, rates and means over a window.
class Reporter {
 public:
  Reporter(const ActorContext& ctx, const shm::ExperienceWriter& writer)
      : ctx_(ctx),
        writer_(writer),
        steps_per_slot_(std::uint64_t{writer.descriptor().steps} * writer.descriptor().envs) {}

  void slot_done(const SlotStats& s, const shm::SlotView& slot, std::uint64_t lag) {
    const auto* returns = slot.episode_returns();
    const auto* lengths = slot.episode_lengths();
    for (std::uint32_t i = 0; i < s.episodes; ++i) {
      recent_.emplace_back(returns[i], lengths[i]);
      if (recent_.size() > 100) recent_.pop_front();
    }
    lag_sum_ += static_cast<double>(lag);
    ++lag_slots_;
    ++slots_;
    policy_s_ += s.policy_s;
    env_s_ += s.env_s;
  }
  void waited(double seconds) { wait_s_ += seconds; }  // on a full ring

  void maybe_report(std::uint64_t version, bool force = false) {
    if (!ctx_.client || (!force && seconds_since(last_) < 0.2)) return;
    shm::ProcessMetrics m;
    const std::uint64_t head = writer_.ring().head.load(std::memory_order_relaxed);
    m.step = head;
    m.version = version;
    m.env_steps = head * steps_per_slot_;
    const double dt = seconds_since(last_);
    m.env_steps_per_s = static_cast<double>(slots_ * steps_per_slot_) / std::max(dt, 1e-9);
    if (!recent_.empty()) {
      double r = 0, l = 0;
      for (const auto& [ret, len] : recent_) r += ret, l += len;
      m.episode_return = r / static_cast<double>(recent_.size());
      m.episode_length = l / static_cast<double>(recent_.size());
    }
    if (lag_slots_ > 0) m.policy_lag_avg = lag_sum_ / static_cast<double>(lag_slots_);
    m.ring_full_waits = writer_.ring().full_waits.load(std::memory_order_relaxed);
    m.env_share = env_s_ / std::max(dt, 1e-9);
    m.compute_share = policy_s_ / std::max(dt, 1e-9);
    m.wait_share = wait_s_ / std::max(dt, 1e-9);
    ctx_.client->report(m);
    slots_ = lag_slots_ = 0;
    lag_sum_ = policy_s_ = env_s_ = wait_s_ = 0;
    last_ = Clock::now();
  }

 private:
  const ActorContext& ctx_;
  const shm::ExperienceWriter& writer_;
  std::uint64_t steps_per_slot_;
  std::deque<std::pair<float, std::uint32_t>> recent_;
  double lag_sum_ = 0;
  double policy_s_ = 0, env_s_ = 0, wait_s_ = 0;  // since the last report
  std::uint64_t lag_slots_ = 0, slots_ = 0;
  Clock::time_point last_ = Clock::now();
};

}  // namespace

int run_rollout_actor(const JobSettings& settings, const ActorContext& ctx) {
  const bool deterministic = settings.shape.deterministic;
  torch::set_num_threads(deterministic ? 1 : settings.actor.threads);
  // actor.device = "cuda": the GPU of the learner rank that consumes this actor's ring (rank r trains
  // on GPU r), whose device slab the follower then copies from where that is rank 0's.
  const std::uint32_t ranks = settings.shape.learners, per_rank = std::max(1u, settings.rollout_actors / ranks);
  const torch::Device device = device_for(settings.actor.device, "actor.device",
                                          static_cast<int>(std::min(ctx.index / per_rank, ranks - 1)));

  const envs::EnvSource source(settings.env);
  const PolicyHead head = policy_head_for(source.spec());
  Model model = make_rl_model(settings.model, settings.rl, source.spec());
  model.to(device);
  FlatParams flat = FlatParams::flatten(model);
  const double wait_s = settings.actor.wait_weights_s;
  const std::string slab = shm::job_segment_name(ctx.job, shm::Kind::weights);
  std::optional<Follower> attached = wait_for_follower(slab, flat, settings.model.name, wait_s, ctx);
  if (!attached) return 0;
  Follower& follower = *attached;
  std::optional<shm::ExperienceWriter> rings = wait_for_rings(ctx, wait_s);
  if (!rings) return 0;
  shm::ExperienceWriter& writer = *rings;
  const shm::ExperienceDescriptor& d = writer.descriptor();

  // A restart draws new episodes and actions rather than replaying the killed incarnation's.
  const std::uint32_t restarts = ctx.client ? ctx.client->restarts() : 0;
  envs::VecEnv env(source.make(settings.env.envs), settings.env.seed, ctx.index, restarts, settings.env.threads);
  const at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(
      envs::action_seed(settings.env.seed, ctx.index, restarts));
  Rollout rollout(model, head, env, d, shm::job_segment_name(ctx.job, shm::Kind::experience), generator);

  // The learner made one ring per rollout actor after JobSettings::parse checked that the update's
  // slots divide among them.
  std::optional<Lockstep> lockstep;
  if (deterministic) lockstep.emplace(settings.rl.slots_per_update / d.num_actors, wait_s);

  if (ctx.client) ctx.client->set_state(shm::ProcessState::running);
  log::info("rollout: {} x {} steps of '{}'{} per slot into ring {} at slot {}, {} on {}{}", d.envs, d.steps,
            source.spec().name, env.threads() > 1 ? fmt::format(" on {} threads", env.threads()) : "", ctx.index,
            writer.ring().head.load(), model.describe(), device.str(), deterministic ? ", deterministic" : "");

  Reporter reporter(ctx, writer);
  const std::function<bool()> stop = [&] { return ctx.stopping(); };
  Backoff backoff;
  while (!ctx.stopping()) {
    ctx.beat();
    const std::optional<shm::SlotView> slot = writer.begin_write();
    if (!slot) {  // full: the learner has not caught up
      reporter.maybe_report(follower.version());
      const std::uint64_t start = monotonic_ns();
      backoff.wait();
      reporter.waited(static_cast<double>(monotonic_ns() - start) * 1e-9);
      continue;
    }
    backoff.reset();
    if (lockstep) {
      if (!lockstep->load(follower, *slot, d, ctx)) break;
    } else {
      (void)follower.update();
    }
    const std::uint64_t version = follower.version();
    const SlotStats stats = rollout.fill(*slot, version, stop);
    if (!stats.complete) break;
    const std::uint64_t latest = follower.reader().latest_version();
    reporter.slot_done(stats, *slot, latest - std::min(latest, version));
    writer.commit(*slot);
    reporter.maybe_report(version);
  }
  reporter.maybe_report(follower.version(), true);
  if (ctx.client) ctx.client->set_state(shm::ProcessState::stopping);
  return 0;
}

}  // namespace tandem::actor
