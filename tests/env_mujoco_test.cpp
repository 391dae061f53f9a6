// The MuJoCo locomotion tasks (envs/mujoco/) and VecEnv's worker threads over them: spaces, long runs
// with finite numbers, seeds, resets, termination and time limits, the reward's parts, action
// clipping, MuJoCo's errors as one line or an exception, and stepping without allocating.
#include <doctest/doctest.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>

#include "envs/mujoco/locomotion_env.hpp"
#include "envs/mujoco/model.hpp"
#include "envs/vec_env.hpp"
#include "tests/harness.hpp"
#include "tests/count_allocations.hpp"  // `allocations`: this binary's heap allocations

using namespace tandem::envs;
using namespace tandem::test;

namespace {

struct Task {
  const char* name;
  int obs_dim, action_dim;
};
const Task kTasks[] = {
    {"Hopper", 11, 3}, {"Walker2d", 17, 6}, {"HalfCheetah", 17, 6}, {"Ant", 105, 8}, {"Humanoid", 348, 17}};

VecEnv make_vec(const std::string& name, int n, std::uint64_t job_seed = 1, int threads = 1) {
  std::vector<std::unique_ptr<Env>> envs;
  envs.reserve(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) envs.push_back(make_env(name));
  return VecEnv(std::move(envs), job_seed, 0, 0, threads);
}

// Actions in [-1.5, 1.5): a third of them out of range, so clipping is exercised too.
void random_actions(std::vector<float>& actions, std::uint64_t& state) {
  for (float& a : actions) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    a = static_cast<float>(static_cast<double>(state >> 11) * 0x1.0p-53 * 3.0 - 1.5);
  }
}

// Everything a step returns, in one vector, for exact comparisons.
std::vector<float> snapshot(const VecEnv& vec) {
  std::vector<float> s(vec.observations().begin(), vec.observations().end());
  s.insert(s.end(), vec.rewards().begin(), vec.rewards().end());
  for (int e = 0; e < vec.size(); ++e) {
    s.push_back(static_cast<float>(vec.terminated()[e] + 2 * vec.truncated()[e]));
    if (!vec.done(e)) continue;
    const auto dim = static_cast<std::size_t>(vec.spec().obs_dim);
    s.insert(s.end(), vec.final_observations().begin() + e * dim, vec.final_observations().begin() + (e + 1) * dim);
    s.push_back(static_cast<float>(vec.episode_returns()[e]));
  }
  return s;
}

std::vector<float> trajectory(const std::string& name, std::uint64_t job_seed, int threads, int envs, int steps) {
  VecEnv vec = make_vec(name, envs, job_seed, threads);
  std::vector<float> actions(static_cast<std::size_t>(envs * vec.spec().action_dim));
  std::uint64_t random = 7;
  std::vector<float> trace = snapshot(vec);
  for (int t = 0; t < steps; ++t) {
    random_actions(actions, random);
    REQUIRE(vec.step(std::span<const float>(actions)));
    const std::vector<float> s = snapshot(vec);
    trace.insert(trace.end(), s.begin(), s.end());
  }
  return trace;
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("mujoco: each task has its spaces and runs 3000 steps of random actions with finite numbers") {
  for (const Task& task : kTasks) {
    const std::string name = task.name;
    CAPTURE(name);
    VecEnv vec = make_vec(name, 2);
    CHECK(vec.spec().name == name);
    CHECK(vec.spec().obs_dim == task.obs_dim);
    CHECK(vec.spec().action_dim == task.action_dim);
    CHECK(vec.spec().num_actions == 0);
    CHECK(vec.spec().action_low == -1.0f);
    CHECK(vec.spec().action_high == 1.0f);
    CHECK(vec.spec().max_episode_steps == 1000);
    std::vector<float> actions(static_cast<std::size_t>(2 * task.action_dim));
    std::uint64_t random = 3;
    int episodes = 0, non_finite = 0;
    for (int t = 0; t < 3000; ++t) {
      random_actions(actions, random);
      REQUIRE(vec.step(std::span<const float>(actions)));
      for (float v : vec.observations()) non_finite += !std::isfinite(v);
      for (float r : vec.rewards()) non_finite += !std::isfinite(r);
      episodes += vec.done(0) + vec.done(1);
    }
    CHECK(non_finite == 0);
    CHECK(episodes >= 4);  // 2 envs x 3000 steps: at least the 1000-step time limits
  }
}

TEST_CASE("mujoco: one seed gives one trajectory bit for bit, another seed another") {
  for (const Task& task : kTasks) {
    const std::string name = task.name;
    CAPTURE(name);
    const std::vector<float> a = trajectory(name, 11, 1, 2, 300);
    CHECK(bitwise_equal(a, trajectory(name, 11, 1, 2, 300)));
    CHECK_FALSE(bitwise_equal(a, trajectory(name, 12, 1, 2, 300)));
  }
}

TEST_CASE("mujoco: VecEnv on 1 or 3 threads gives bit-identical observations, rewards and episode ends") {
  for (const char* name : {"Hopper", "Ant", "Humanoid"}) {
    CAPTURE(name);
    const std::vector<float> one = trajectory(name, 5, 1, 7, 400);
    CHECK(bitwise_equal(one, trajectory(name, 5, 3, 7, 400)));
    CHECK(bitwise_equal(one, trajectory(name, 5, 2, 7, 400)));
  }
}

TEST_CASE("mujoco: a reset from one seed lands in the same state, whatever the env did before") {
  for (const Task& task : kTasks) {
    const std::string name = task.name;
    CAPTURE(name);
    const auto env = make_env(name);
    const auto dim = static_cast<std::size_t>(task.obs_dim);
    std::vector<float> first(dim), again(dim), other(dim), scratch(dim);
    Rng rng(99);
    env->reset(rng, first.data());
    const std::vector<float> push(static_cast<std::size_t>(task.action_dim), 0.7f);
    for (int t = 0; t < 20; ++t) (void)env->step(ActionRef{0, push.data()}, scratch.data());
    Rng same(99), different(100);
    env->reset(same, again.data());
    CHECK(std::memcmp(first.data(), again.data(), dim * sizeof(float)) == 0);
    env->reset(different, other.data());
    CHECK(first != other);
    CHECK(scratch != first);
  }
}

TEST_CASE("mujoco: Hopper and Walker2d fall and terminate; HalfCheetah only ever truncates, at 1000 steps") {
  for (const char* name : {"Hopper", "Walker2d"}) {
    CAPTURE(name);
    for (const bool zero : {true, false}) {
      CAPTURE(zero);
      VecEnv vec = make_vec(name, 1, 4);
      std::vector<float> actions(static_cast<std::size_t>(vec.spec().action_dim), 0.0f);
      std::uint64_t random = 5;
      int t = 0;
      while (!vec.done(0) && t < 1000) {
        if (!zero) random_actions(actions, random);
        REQUIRE(vec.step(std::span<const float>(actions)));
        ++t;
      }
      CHECK(vec.terminated()[0] == 1);
      CHECK(vec.truncated()[0] == 0);
      CHECK(t < 1000);
      CHECK(vec.episode_lengths()[0] == t);
    }
  }
  VecEnv cheetah = make_vec("HalfCheetah", 1);
  std::vector<float> actions(6);
  std::uint64_t random = 6;
  for (int t = 1; t <= 1000; ++t) {
    random_actions(actions, random);
    REQUIRE(cheetah.step(std::span<const float>(actions)));
    REQUIRE(cheetah.terminated()[0] == 0);
    REQUIRE(cheetah.done(0) == (t == 1000));
  }
  CHECK(cheetah.bootstraps(0));
}

TEST_CASE("mujoco: Hopper's reward is forward velocity plus 1 while healthy less 1e-3 |a|^2 of the clipped action") {
  auto hopper = make_env("Hopper");
  const auto& env = dynamic_cast<const mujoco::LocomotionEnv&>(*hopper);
  std::vector<float> obs(11);
  Rng rng(1);
  hopper->reset(rng, obs.data());
  const std::vector<float> action{0.5f, -3.0f, 0.25f};  // the second is clipped to -1
  const double x_before = env.data().qpos[0];
  const StepOut out = hopper->step(ActionRef{0, action.data()}, obs.data());
  REQUIRE_FALSE(out.terminated);
  const double dt = 4 * env.model().opt.timestep;
  const double expected = (env.data().qpos[0] - x_before) / dt + 1.0 - 1e-3 * (0.25 + 1.0 + 0.0625);
  CHECK(out.reward == doctest::Approx(expected).epsilon(1e-6));
  CHECK(obs[0] == static_cast<float>(env.data().qpos[1]));  // qpos without x comes first
}

TEST_CASE("mujoco: an action beyond [-1, 1] acts as its bound does, to the last bit") {
  for (const Task& task : kTasks) {
    const std::string name = task.name;
    CAPTURE(name);
    VecEnv bounded = make_vec(name, 1, 3), beyond = make_vec(name, 1, 3);
    const auto n = static_cast<std::size_t>(task.action_dim);
    std::vector<float> at_bound(n), past_bound(n);
    for (std::size_t i = 0; i < n; ++i) {
      at_bound[i] = i % 2 ? 1.0f : -1.0f;
      past_bound[i] = i % 2 ? 4.0f : -9.0f;
    }
    for (int t = 0; t < 30; ++t) {
      REQUIRE(bounded.step(std::span<const float>(at_bound)));
      REQUIRE(beyond.step(std::span<const float>(past_bound)));
    }
    CHECK(bitwise_equal(snapshot(bounded), snapshot(beyond)));
  }
}

TEST_CASE("mujoco: Ant observes clipped contact forces once its feet touch the ground") {
  VecEnv ant = make_vec("Ant", 1);
  const std::vector<float> still(8, 0.0f);
  for (int t = 0; t < 40; ++t) REQUIRE(ant.step(std::span<const float>(still)));
  const auto obs = ant.observations();
  int touching = 0;
  for (int i = 27; i < 105; ++i) {
    CHECK(std::abs(obs[i]) <= 1.0f);
    touching += obs[i] != 0.0f;
  }
  CHECK(touching > 0);
}

TEST_CASE("mujoco: a malformed model is one line naming the file and MuJoCo's reason") {
  const std::string broken = error_of([] { mujoco::load_model("crafted.xml", "<mujoco><worldbody><body>"); });
  CHECK(broken.starts_with("MuJoCo model 'crafted.xml' does not load: "));
  CHECK(broken.size() > std::string("MuJoCo model 'crafted.xml' does not load: ").size());
  CHECK(broken.find('\n') == std::string::npos);
  const std::string bad_value = error_of([] {
    mujoco::load_model("negative.xml", "<mujoco><worldbody><geom type=\"sphere\" size=\"oops\"/></worldbody></mujoco>");
  });
  CHECK(bad_value.starts_with("MuJoCo model 'negative.xml' does not load: "));
  CHECK(bad_value.find('\n') == std::string::npos);
  CHECK(error_of([] { mujoco::load_model("../escape.xml", "<mujoco/>"); }).find("plain file name") !=
        std::string::npos);
  CHECK(error_of([] { mujoco::load_model("fine.xml", "<mujoco><worldbody/></mujoco>"); }).empty());
}

TEST_CASE("mujoco: a MuJoCo fatal error is an exception carrying its message, and the process lives on") {
  mujoco::install_error_hooks();
  bool caught = false;
  try {
    mju_error("a test's fatal error");
  } catch (const mujoco::MujocoError& e) {
    caught = std::string(e.what()) == "MuJoCo: a test's fatal error";
  }
  CHECK(caught);
}

TEST_CASE("mujoco: stepping allocates nothing on one thread or three, auto-resets included") {
  for (const int threads : {1, 3}) {
    CAPTURE(threads);
    VecEnv vec = make_vec("Hopper", 6, 2, threads);
    std::vector<float> actions(18);
    std::uint64_t random = 9;
    int episodes = 0;
    const long before = allocations.load();
    for (int t = 0; t < 500; ++t) {
      random_actions(actions, random);
      REQUIRE(vec.step(std::span<const float>(actions)));
      for (int e = 0; e < 6; ++e) episodes += vec.done(e);
    }
    CHECK(allocations.load() == before);
    CHECK(episodes >= 6);
  }
}
