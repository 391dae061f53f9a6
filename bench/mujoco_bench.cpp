// The loops `tandem-bench mujoco` times (mujoco_options.hpp says what each measures).
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <thread>

#include "common/clock.hpp"
#include "common/error.hpp"
#include "envs/async_vec_env.hpp"
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

// Runs `chunk` (which advances `envs` envs one step each and returns the episodes it ended) for the
// warm-up, then for `seconds`, and reports the rates of the measured part.
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
  if (task != "Hopper" && task != "Walker2d" && task != "HalfCheetah" && task != "Ant" && task != "Humanoid")
    fail("--tasks: '{}' is not a MuJoCo task: choose Hopper, Walker2d, HalfCheetah, Ant or Humanoid", task);
  return envs::make_env(task);
}

// The bare loop: the envs' own mjData driven by hand (mujoco_options.hpp).
class BareLoop {
 public:
  BareLoop(const std::string& task, const MujocoBenchOptions& o) : envs_(o.envs) {
    list_.reserve(static_cast<std::size_t>(envs_));
    rngs_.reserve(static_cast<std::size_t>(envs_));
    for (int e = 0; e < envs_; ++e) {
      list_.push_back(make_task(task));
      rngs_.emplace_back(envs::env_seed(kJobSeed, 0, static_cast<std::uint64_t>(e)));  // as VecEnv seeds env e
    }
    scratch_.resize(static_cast<std::size_t>(list_[0]->spec().obs_dim));
    for (std::size_t i = 0; i < list_.size(); ++i) list_[i]->reset(rngs_[i], scratch_.data());
    const auto& first = dynamic_cast<const LocomotionEnv&>(*list_[0]);
    model_ = &first.model();
    frame_skip_ = first.frame_skip();
    lengths_.assign(static_cast<std::size_t>(envs_), 0);
    // The actions mapped onto each actuator's ctrlrange as the env maps them, ahead of the loop (the
    // identity but for Humanoid's [-0.4, 0.4]), so both loops write the same ctrl to the last bit.
    const std::vector<float> actions = action_table(static_cast<std::size_t>(envs_) *
                                                    static_cast<std::size_t>(model_->nu));
    ctrl_table_.resize(actions.size());
    for (std::size_t k = 0; k < actions.size(); ++k) {
      const auto j = static_cast<int>(k % static_cast<std::size_t>(model_->nu));
      const double low = model_->actuator_ctrlrange[2 * j], high = model_->actuator_ctrlrange[2 * j + 1];
      const bool limited = model_->actuator_ctrllimited[j] != 0;
      ctrl_table_[k] = (limited ? 0.5 * (low + high) : 0.0) + (limited ? 0.5 * (high - low) : 1.0) * actions[k];
    }
  }

  // Advances every env one step; returns the episodes that ended.
  long step() {
    const int nu = model_->nu;
    const double* ctrl = &ctrl_table_[static_cast<std::size_t>(row_++ % kActionRows) * envs_ * nu];
    long ended = 0;
    for (int e = 0; e < envs_; ++e) {
      const auto i = static_cast<std::size_t>(e);
      auto& env = static_cast<LocomotionEnv&>(*list_[i]);
      mjData* d = &env.mutable_data();
      for (int j = 0; j < nu; ++j) d->ctrl[j] = ctrl[e * nu + j];
      for (int k = 0; k < frame_skip_; ++k) mj_step(model_, d);
      env.after_physics();
      if (!env.healthy() || ++lengths_[i] >= 1000) {
        env.reset(rngs_[i], scratch_.data());
        lengths_[i] = 0;
        ++ended;
      }
    }
    return ended;
  }

 private:
  int envs_;
  std::vector<std::unique_ptr<envs::Env>> list_;
  std::vector<envs::Rng> rngs_;
  std::vector<float> scratch_;
  std::vector<double> ctrl_table_;
  std::vector<int> lengths_;
  const mjModel* model_ = nullptr;
  int frame_skip_ = 1;
  long row_ = 0;
};

std::vector<std::unique_ptr<envs::Env>> make_envs(const std::string& task, int n) {
  std::vector<std::unique_ptr<envs::Env>> list;
  list.reserve(static_cast<std::size_t>(n));
  for (int e = 0; e < n; ++e) list.push_back(make_task(task));
  return list;
}

// VecEnv over the same envs, seeds and actions.
class VecLoop {
 public:
  VecLoop(const std::string& task, int threads, const MujocoBenchOptions& o)
      : vec_(make_envs(task, o.envs), kJobSeed, 0, 0, threads) {
    width_ = static_cast<std::size_t>(o.envs) * static_cast<std::size_t>(vec_.spec().action_dim);
    table_ = action_table(width_);
  }

  long step() {
    const std::span<const float> actions(&table_[static_cast<std::size_t>(row_++ % kActionRows) * width_], width_);
    if (!vec_.step(actions)) fail("VecEnv refused {}'s actions", vec_.spec().name);
    long ended = 0;
    for (int e = 0; e < vec_.size(); ++e) ended += vec_.done(e);
    return ended;
  }

 private:
  envs::VecEnv vec_;
  std::size_t width_ = 0;
  std::vector<float> table_;
  long row_ = 0;
};

// AsyncVecEnv over the same envs and seeds: each chunk receives one batch and sends its envs again
// with a row of the same action table (so the actions an env sees differ from the other loops').
class AsyncLoop {
 public:
  AsyncLoop(const std::string& task, int threads, int batch, const MujocoBenchOptions& o)
      : vec_(make_envs(task, o.envs), batch, threads, kJobSeed) {
    width_ = static_cast<std::size_t>(batch) * static_cast<std::size_t>(vec_.spec().action_dim);
    table_ = action_table(width_);
    vec_.reset();  // the warm-up receives the resets
  }

  long step() { return send(vec_.recv()); }

 private:
  long send(const envs::AsyncBatch& batch) {
    const std::span<const float> actions(&table_[static_cast<std::size_t>(row_++ % kActionRows) * width_], width_);
    ids_.assign(batch.env_ids.begin(), batch.env_ids.end());
    long ended = 0;
    for (std::size_t i = 0; i < ids_.size(); ++i) ended += batch.done(static_cast<int>(i));
    vec_.send(actions, ids_);
    return ended;
  }

  envs::AsyncVecEnv vec_;
  std::size_t width_ = 0;
  std::vector<float> table_;
  std::vector<std::int32_t> ids_;
  long row_ = 0;
};

}  // namespace

int frame_skip_of(const std::string& task) { return dynamic_cast<const LocomotionEnv&>(*make_task(task)).frame_skip(); }

LoopRate measure_bare(const std::string& task, const MujocoBenchOptions& o) {
  BareLoop loop(task, o);
  return time_loop(o.envs, o.seconds, [&] { return loop.step(); });
}

LoopRate measure_vec_env(const std::string& task, int threads, const MujocoBenchOptions& o) {
  VecLoop loop(task, threads, o);
  return time_loop(o.envs, o.seconds, [&] { return loop.step(); });
}

LoopRate measure_async(const std::string& task, int threads, const MujocoBenchOptions& o) {
  AsyncLoop loop(task, threads, o.batch, o);
  return time_loop(o.batch, o.seconds, [&] { return loop.step(); });
}

LoopRate measure_bare_ceiling(const std::string& task, int threads, const MujocoBenchOptions& o) {
  MujocoBenchOptions part = o;
  part.envs = std::max(1, o.envs / threads);
  std::vector<std::unique_ptr<BareLoop>> loops;
  loops.reserve(static_cast<std::size_t>(threads));
  for (int k = 0; k < threads; ++k) loops.push_back(std::make_unique<BareLoop>(task, part));
  std::vector<LoopRate> rates(static_cast<std::size_t>(threads));
  std::atomic<int> ready{0};
  {
    std::vector<std::jthread> workers;
    workers.reserve(static_cast<std::size_t>(threads));
    for (int k = 0; k < threads; ++k)
      workers.emplace_back([&, k] {
        ready.fetch_add(1);
        while (ready.load() < threads) std::this_thread::yield();  // all start together
        rates[static_cast<std::size_t>(k)] = time_loop(part.envs, o.seconds, [&] { return loops[k]->step(); });
      });
  }
  LoopRate total;
  for (const LoopRate& r : rates) {
    total.steps_per_s += r.steps_per_s;
    total.steps += r.steps;
    total.episodes += r.episodes;
  }
  return total;  // steps_per_cpu_s stays 0: each loop's reading of the process's CPU clock counts the others'
}

double measure_paired_overhead(const std::string& task, const MujocoBenchOptions& o) {
  BareLoop bare(task, o);
  VecLoop vec(task, 1, o);
  constexpr int kChunk = 4;  // steps of every env per turn: a few ms, short beside another process's bursts
  double bare_cpu = 0, vec_cpu = 0;
  const double budget = o.seconds * o.rounds;
  for (int turn = 0; bare_cpu + vec_cpu < budget; ++turn) {
    const bool bare_first = turn % 2 == 0;  // alternate who goes first, so neither always follows the other
    for (int side = 0; side < 2; ++side) {
      const bool run_bare = (side == 0) == bare_first;
      const double start = thread_cpu_s();
      for (int k = 0; k < kChunk; ++k) (void)(run_bare ? bare.step() : vec.step());
      (run_bare ? bare_cpu : vec_cpu) += thread_cpu_s() - start;
    }
  }
  return vec_cpu / bare_cpu - 1.0;
}

}  // namespace tandem::bench
