// The loops `tandem-bench mujoco` times (mujoco_options.hpp says what each measures).
#include <time.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>

#include "common/error.hpp"
#include "envs/mujoco/locomotion_env.hpp"
#include "envs/seeds.hpp"
#include "envs/vec_env.hpp"
#include "bench/mujoco_options.hpp"

namespace tandem::bench {
namespace {

using envs::mujoco::LocomotionEnv;
constexpr int kActionRows = 256;  // rows of random actions, cycled: the generator stays out of the loop
constexpr double kWarmupS = 0.2;
constexpr std::uint64_t kJobSeed = 1;  // the bare loop's envs start where VecEnv's do

double process_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// kActionRows x width floats uniform in [-1, 1), the same for the bare loop and VecEnv.
std::vector<float> action_table(std::size_t width) {
  std::vector<float> table(kActionRows * width);
  std::uint64_t state = 12345;
  for (float& a : table) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    a = static_cast<float>(static_cast<double>(state >> 11) * 0x1.0p-53 * 2.0 - 1.0);
  }
  return table;
}

// Runs `chunk` (which advances every env one step and returns the episodes it ended) for the warm-up,
// then for `seconds`, and reports the rates of the measured part.
template <class Chunk>
LoopRate time_loop(int envs, double seconds, Chunk chunk) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point warm = Clock::now();
  while (std::chrono::duration<double>(Clock::now() - warm).count() < kWarmupS) (void)chunk();
  LoopRate rate;
  long rounds = 0;
  const Clock::time_point start = Clock::now();
  const double cpu_start = process_cpu_s();
  double wall = 0;
  while (wall < seconds) {
    for (int i = 0; i < 8; ++i) rate.episodes += chunk();
    rounds += 8;
    wall = std::chrono::duration<double>(Clock::now() - start).count();
  }
  rate.steps = rounds * envs;
  rate.steps_per_s = static_cast<double>(rate.steps) / wall;
  rate.steps_per_cpu_s = static_cast<double>(rate.steps) / (process_cpu_s() - cpu_start);
  return rate;
}

std::unique_ptr<envs::Env> make_task(const std::string& task) {
  if (task != "Hopper" && task != "Walker2d" && task != "HalfCheetah" && task != "Ant")
    fail("--tasks: '{}' is not a MuJoCo task: choose Hopper, Walker2d, HalfCheetah or Ant", task);
  return envs::make_env(task);
}

}  // namespace

int frame_skip_of(const std::string& task) { return dynamic_cast<const LocomotionEnv&>(*make_task(task)).frame_skip(); }

LoopRate measure_bare(const std::string& task, const MujocoBenchOptions& o) {
  std::vector<std::unique_ptr<envs::Env>> list;
  std::vector<envs::Rng> rngs;
  list.reserve(static_cast<std::size_t>(o.envs));
  rngs.reserve(static_cast<std::size_t>(o.envs));
  for (int e = 0; e < o.envs; ++e) {
    list.push_back(make_task(task));
    rngs.emplace_back(envs::env_seed(kJobSeed, 0, static_cast<std::uint64_t>(e)));  // as VecEnv seeds env e
  }
  std::vector<float> scratch(static_cast<std::size_t>(list[0]->spec().obs_dim));
  for (int e = 0; e < o.envs; ++e)
    list[static_cast<std::size_t>(e)]->reset(rngs[static_cast<std::size_t>(e)], scratch.data());
  const auto& first = dynamic_cast<const LocomotionEnv&>(*list[0]);
  const mjModel* m = &first.model();
  const int frame_skip = first.frame_skip(), nu = m->nu;
  std::vector<int> lengths(static_cast<std::size_t>(o.envs), 0);
  const std::vector<float> table = action_table(static_cast<std::size_t>(o.envs) * static_cast<std::size_t>(nu));
  long row = 0;
  return time_loop(o.envs, o.seconds, [&] {
    const float* actions = &table[static_cast<std::size_t>(row++ % kActionRows) * o.envs * nu];
    long ended = 0;
    for (int e = 0; e < o.envs; ++e) {
      const auto i = static_cast<std::size_t>(e);
      auto& env = static_cast<LocomotionEnv&>(*list[i]);
      mjData* d = &env.mutable_data();
      for (int j = 0; j < nu; ++j) d->ctrl[j] = actions[e * nu + j];
      for (int k = 0; k < frame_skip; ++k) mj_step(m, d);
      env.after_physics();
      if (!env.healthy() || ++lengths[i] >= 1000) {
        env.reset(rngs[i], scratch.data());
        lengths[i] = 0;
        ++ended;
      }
    }
    return ended;
  });
}

LoopRate measure_vec_env(const std::string& task, int threads, const MujocoBenchOptions& o) {
  std::vector<std::unique_ptr<envs::Env>> list;
  list.reserve(static_cast<std::size_t>(o.envs));
  for (int e = 0; e < o.envs; ++e) list.push_back(make_task(task));
  envs::VecEnv vec(std::move(list), kJobSeed, /*actor_index=*/0, /*restarts=*/0, threads);
  const auto width = static_cast<std::size_t>(o.envs) * static_cast<std::size_t>(vec.spec().action_dim);
  const std::vector<float> table = action_table(width);
  long row = 0;
  return time_loop(o.envs, o.seconds, [&] {
    const std::span<const float> actions(&table[static_cast<std::size_t>(row++ % kActionRows) * width], width);
    if (!vec.step(actions)) fail("VecEnv refused {}'s actions", task);
    long ended = 0;
    for (int e = 0; e < vec.size(); ++e) ended += vec.done(e);
    return ended;
  });
}

}  // namespace tandem::bench
