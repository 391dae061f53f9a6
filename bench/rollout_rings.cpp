// (a) of `tandem-bench rollout`: null envs through the experience rings, no network.
//
// Each actor thread owns a VecEnv of E null envs and ring a; per slot it writes what a rollout actor
// writes (observations with the bootstrap row, actions, rewards, terminated, truncated, log-probs,
// logits, values, final observations and finished episodes) and commits (checksum + release). The
// "policy" is a constant action with the log-prob and logits of a uniform choice, so the figure is the
// env loop plus the ring, nothing else. One consumer thread does what the learner does per slot:
// peek, verify the checksum, release. Figures are per actor CPU second (CLOCK_THREAD_CPUTIME_ID),
// which is steps/s per actor core without counting the time a shared machine gave to others.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "common/clock.hpp"
#include "common/error.hpp"
#include "envs/env.hpp"
#include "envs/vec_env.hpp"
#include "shm/experience_ring.hpp"
#include "bench/rollout_options.hpp"

namespace tandem::bench {
namespace {

// 0: warming up, 1: measuring, 2: stop. Threads sample their counters at each change.
enum Phase : int { warmup = 0, measuring = 1, stopping = 2 };

struct Sample {
  double cpu_s = 0;
  std::uint64_t steps = 0;
};

struct ThreadFigures {
  Sample at_start, at_end;
  double steps_per_cpu_s() const {
    const double cpu = at_end.cpu_s - at_start.cpu_s;
    return cpu > 0 ? double(at_end.steps - at_start.steps) / cpu : 0;
  }
};

// Records `now` at the first call that sees each phase change.
struct PhaseSampler {
  int seen = warmup;
  ThreadFigures figures;
  // True when the thread should stop.
  bool update(const std::atomic<int>& phase, std::uint64_t steps) {
    const int p = phase.load(std::memory_order_acquire);
    if (p == seen) return false;
    const Sample now{thread_cpu_s(), steps};
    if (seen == warmup) figures.at_start = now;
    if (p == stopping) figures.at_end = now;
    seen = p;
    return p == stopping;
  }
};

std::unique_ptr<envs::VecEnv> null_vec_env(std::uint32_t envs, std::uint32_t actor) {
  std::vector<std::unique_ptr<envs::Env>> list;
  for (std::uint32_t e = 0; e < envs; ++e) list.push_back(envs::make_env("null"));
  return std::make_unique<envs::VecEnv>(std::move(list), /*job_seed=*/0, actor);
}

// Fills slot row t from the env's state before and after one step.
void write_step(const shm::SlotView& slot, envs::VecEnv& env, const std::vector<std::int32_t>& actions, std::uint32_t t,
                std::uint32_t& episodes) {
  const std::size_t E = actions.size(), D = static_cast<std::size_t>(env.spec().obs_dim), row = t * E;
  std::memcpy(slot.observations() + row * D, env.observations().data(), E * D * sizeof(float));
  if (!env.step(std::span<const std::int32_t>(actions))) fail("the null env refused its actions");
  std::copy(actions.begin(), actions.end(), slot.discrete_actions() + row);
  std::memcpy(slot.rewards() + row, env.rewards().data(), E * sizeof(float));
  std::memcpy(slot.terminated() + row, env.terminated().data(), E);
  std::memcpy(slot.truncated() + row, env.truncated().data(), E);
  std::fill_n(slot.log_probs() + row, E, -std::log(2.0f));  // a uniform choice of 2 actions
  std::fill_n(slot.logits() + row * 2, 2 * E, 0.0f);
  std::fill_n(slot.values() + row, E, 0.0f);
  for (std::size_t e = 0; e < E; ++e) {
    if (!env.done(static_cast<int>(e))) continue;
    std::memcpy(slot.final_observations() + (row + e) * D, env.final_observations().data() + e * D, D * sizeof(float));
    slot.episode_returns()[episodes] = static_cast<float>(env.episode_returns()[e]);
    slot.episode_lengths()[episodes] = static_cast<std::uint32_t>(env.episode_lengths()[e]);
    ++episodes;
  }
}

void run_actor(const std::string& job, std::uint32_t actor, const RolloutBenchOptions& o, const std::atomic<int>& phase,
               ThreadFigures& out) {
  auto writer = shm::ExperienceWriter::attach(job, actor);
  auto env = null_vec_env(o.envs, actor);
  const std::vector<std::int32_t> actions(o.envs, 0);
  const std::size_t D = static_cast<std::size_t>(env->spec().obs_dim);
  PhaseSampler sampler;
  std::uint64_t steps = 0;
  while (!sampler.update(phase, steps)) {
    auto slot = writer.begin_write();
    if (!slot) {  // backpressure: the consumer has not released a slot yet
      std::this_thread::yield();
      continue;
    }
    std::uint32_t episodes = 0;
    for (std::uint32_t t = 0; t < o.steps; ++t) write_step(*slot, *env, actions, t, episodes);
    const std::size_t last = std::size_t{o.steps} * o.envs;
    std::memcpy(slot->observations() + last * D, env->observations().data(), o.envs * D * sizeof(float));
    std::fill_n(slot->values() + last, o.envs, 0.0f);
    slot->header().policy_version = 0;
    slot->header().episodes = episodes;
    writer.commit(*slot);
    steps += last;
  }
  out = sampler.figures;
}

struct ConsumerCounts {
  std::atomic<std::uint64_t> steps{0}, slots{0}, refused{0};
};

void run_consumer(const shm::ExperienceRings& rings, const std::atomic<int>& phase, ConsumerCounts& counts,
                  ThreadFigures& out) {
  const auto& d = rings.descriptor();
  const std::uint64_t per_slot = std::uint64_t{d.steps} * d.envs;
  PhaseSampler sampler;
  std::uint64_t steps = 0;
  while (!sampler.update(phase, steps)) {
    bool any = false;
    for (std::uint32_t a = 0; a < d.num_actors; ++a) {
      auto slot = rings.peek(a);
      if (!slot) continue;
      any = true;
      if (!rings.verify(a, *slot)) counts.refused.fetch_add(1, std::memory_order_relaxed);
      rings.release(a);
      steps += per_slot;
      counts.steps.fetch_add(per_slot, std::memory_order_relaxed);
      counts.slots.fetch_add(1, std::memory_order_relaxed);
    }
    if (!any) std::this_thread::yield();
  }
  out = sampler.figures;
}

// The same VecEnv stepped alone for ~0.3 s of this thread's CPU: what the env costs without the ring.
double env_only_steps_per_cpu_s(const RolloutBenchOptions& o) {
  auto env = null_vec_env(o.envs, 0);
  const std::vector<std::int32_t> actions(o.envs, 0);
  const double start = thread_cpu_s();
  std::uint64_t steps = 0;
  while (thread_cpu_s() - start < 0.3) {
    for (int i = 0; i < 64; ++i)
      if (!env->step(std::span<const std::int32_t>(actions))) fail("the null env refused its actions");
    steps += 64ull * o.envs;
  }
  return double(steps) / (thread_cpu_s() - start);
}

void check_options(const RolloutBenchOptions& o) {
  if (o.envs < 1 || o.envs > 65536) fail("--envs {} is out of range: use 1..65536", o.envs);
  if (o.steps < 1 || o.steps > 65536) fail("--steps {} is out of range: use 1..65536", o.steps);
  if (o.slots < 2 || o.slots > 1024) fail("--slots {} is out of range: use 2..1024", o.slots);
  if (o.actors < 1 || o.actors > 64) fail("--actors {} is out of range: use 1..64", o.actors);
  if (!(o.seconds > 0) || o.seconds > 3600)
    fail("--seconds {} is out of range: use a positive number up to 3600", o.seconds);
}

}  // namespace

Json measure_rings(const RolloutBenchOptions& o) {
  check_options(o);
  const std::string job = fmt::format("rollout-bench-{}", ::getpid());
  // Before the segment exists: a Ctrl-C at any point after shm_open leaves no segment behind.
  shm::UnlinkOnSignal unlink_on_signal(shm::job_segment_name(job, shm::Kind::experience));
  auto rings = shm::ExperienceRings::create(job, {.num_actors = o.actors,
                                                  .slots_per_ring = o.slots,
                                                  .steps = o.steps,
                                                  .envs = o.envs,
                                                  .obs_dim = 4,
                                                  .action_kind = shm::ActionKind::discrete,
                                                  .action_dim = 1,
                                                  .logits_dim = 2});
  const double env_only = env_only_steps_per_cpu_s(o);

  std::atomic<int> phase{warmup};
  ConsumerCounts consumed;
  std::vector<ThreadFigures> actor_figures(o.actors);
  ThreadFigures consumer_figures;
  std::mutex error_mutex;
  std::exception_ptr error;
  auto guarded = [&](auto body) {
    return [&, body] {
      try {
        body();
      } catch (...) {
        std::lock_guard lock(error_mutex);
        if (!error) error = std::current_exception();
      }
    };
  };
  std::vector<std::thread> threads;
  for (std::uint32_t a = 0; a < o.actors; ++a)
    threads.emplace_back(guarded([&, a] { run_actor(job, a, o, phase, actor_figures[a]); }));
  threads.emplace_back(guarded([&] { run_consumer(rings, phase, consumed, consumer_figures); }));

  std::this_thread::sleep_for(std::chrono::duration<double>(std::min(1.0, 0.25 * o.seconds)));  // warm up
  const std::uint64_t wall0 = monotonic_ns(), steps0 = consumed.steps.load();
  phase.store(measuring, std::memory_order_release);
  std::this_thread::sleep_for(std::chrono::duration<double>(o.seconds));
  const std::uint64_t wall1 = monotonic_ns(), steps1 = consumed.steps.load();
  phase.store(stopping, std::memory_order_release);
  for (auto& t : threads) t.join();
  if (error) std::rethrow_exception(error);

  const double wall_s = double(wall1 - wall0) * 1e-9;
  double actor_cpu_s = 0, actor_steps = 0;
  for (const auto& f : actor_figures) {
    actor_cpu_s += f.at_end.cpu_s - f.at_start.cpu_s;
    actor_steps += double(f.at_end.steps - f.at_start.steps);
  }
  const double per_actor_core = actor_cpu_s > 0 ? actor_steps / actor_cpu_s : 0;
  std::uint64_t full_waits = 0;
  for (std::uint32_t a = 0; a < o.actors; ++a) full_waits += rings.ring(a).full_waits.load();
  const auto& d = rings.descriptor();
  const std::uint64_t refused = consumed.refused.load();

  fmt::print(
      "(a) null env through the rings: {} actor thread{} x {} envs x {} steps per slot ({:.2f} MB), {} slots, "
      "one consumer thread\n",
      o.actors, o.actors == 1 ? "" : "s", o.envs, o.steps, double(d.slot_bytes) / 1e6, o.slots);
  fmt::print("  {:<52} {:>14.2f} M\n", "steps/s per actor core (CPU s of the actor threads)", per_actor_core / 1e6);
  fmt::print("  {:<52} {:>14.2f} M\n", "steps/s consumed, wall clock", double(steps1 - steps0) / wall_s / 1e6);
  fmt::print("  {:<52} {:>14.2f} M\n", "steps/s per consumer core (peek + verify + release)",
             consumer_figures.steps_per_cpu_s() / 1e6);
  fmt::print("  {:<52} {:>14.2f} M\n", "steps/s per core, VecEnv alone (no ring)", env_only / 1e6);
  fmt::print("  slots consumed {}, refused (checksum) {}, ring-full waits {}\n", consumed.slots.load(), refused,
             full_waits);
  if (refused != 0) fail("the null-env ring bench refused {} slots: a slot's checksum failed, which is a bug", refused);
  return {{"actors", o.actors},
          {"envs", o.envs},
          {"steps", o.steps},
          {"slots", o.slots},
          {"slot_bytes", d.slot_bytes},
          {"seconds", rounded(wall_s, 3)},
          {"steps_per_s_per_actor_core", rounded(per_actor_core, 0)},
          {"steps_per_s_wall", rounded(double(steps1 - steps0) / wall_s, 0)},
          {"steps_per_s_per_consumer_core", rounded(consumer_figures.steps_per_cpu_s(), 0)},
          {"env_only_steps_per_s_per_core", rounded(env_only, 0)},
          {"slots_consumed", consumed.slots.load()},
          {"refused", refused},
          {"ring_full_waits", full_waits}};
}

}  // namespace tandem::bench
