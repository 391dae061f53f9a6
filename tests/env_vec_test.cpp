// VecEnv and the built-in envs' contracts: reset ranges, time limits, seeds, the final-observation
// rule, stepping on worker threads, and what a caller gets for actions or specs that do not fit.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>

#include "envs/vec_env.hpp"
#include "tests/count_allocations.hpp"  // so a test can pin that stepping allocates nothing
#include "tests/harness.hpp"

using namespace tandem::envs;
using namespace tandem::test;


namespace {

VecEnv make_vec(const std::string& name, int n, std::uint64_t job_seed = 1, std::uint32_t actor = 0) {
  std::vector<std::unique_ptr<Env>> envs;
  envs.reserve(n);
  for (int i = 0; i < n; ++i) envs.push_back(make_env(name));
  return VecEnv(std::move(envs), job_seed, actor);
}

std::vector<float> row(const VecEnv& vec, std::span<const float> all, int e) {
  const auto dim = static_cast<std::size_t>(vec.spec().obs_dim);
  return {all.begin() + e * dim, all.begin() + (e + 1) * dim};
}

bool step_all(VecEnv& vec, std::int32_t action) {
  const std::vector<std::int32_t> actions(vec.size(), action);
  return vec.step(std::span<const std::int32_t>(actions));
}

}  // namespace

TEST_CASE("envs: every reset lands in Gymnasium's reset range and spreads over it") {
  constexpr int n = 256;
  SUBCASE("CartPole-v1: every state variable uniform in [-0.05, 0.05)") {
    VecEnv vec = make_vec("CartPole-v1", n);
    const auto obs = vec.observations();
    CHECK(*std::min_element(obs.begin(), obs.end()) >= -0.05f);
    CHECK(*std::max_element(obs.begin(), obs.end()) <= 0.05f);
    CHECK(*std::min_element(obs.begin(), obs.end()) < -0.049f);
    CHECK(*std::max_element(obs.begin(), obs.end()) > 0.049f);
  }
  SUBCASE("Acrobot-v1: both angles and both velocities in [-0.1, 0.1)") {
    VecEnv vec = make_vec("Acrobot-v1", n);
    float widest = 0;
    for (int e = 0; e < n; ++e) {
      const auto o = row(vec, vec.observations(), e);
      for (int angle : {0, 2}) {
        CHECK(std::abs(o[angle + 1]) <= std::sin(0.1f) + 1e-7f);
        CHECK(o[angle] >= std::cos(0.1f) - 1e-7f);
      }
      CHECK(std::abs(o[4]) <= 0.1f);
      CHECK(std::abs(o[5]) <= 0.1f);
      widest = std::max({widest, std::abs(o[4]), std::abs(o[5])});
    }
    CHECK(widest > 0.099f);
  }
  SUBCASE("MountainCar-v0: position in [-0.6, -0.4), velocity 0") {
    VecEnv vec = make_vec("MountainCar-v0", n);
    float low = 0, high = -1;
    for (int e = 0; e < n; ++e) {
      const auto o = row(vec, vec.observations(), e);
      CHECK(o[0] >= -0.6f);
      CHECK(o[0] <= -0.4f);
      CHECK(o[1] == 0.0f);
      low = std::min(low, o[0]);
      high = std::max(high, o[0]);
    }
    CHECK(low < -0.59f);
    CHECK(high > -0.41f);
  }
  SUBCASE("Pendulum-v1: angle anywhere in [-pi, pi), angular velocity in [-1, 1)") {
    VecEnv vec = make_vec("Pendulum-v1", n);
    int left_half = 0;
    for (int e = 0; e < n; ++e) {
      const auto o = row(vec, vec.observations(), e);
      CHECK(o[0] * o[0] + o[1] * o[1] == doctest::Approx(1.0f).epsilon(1e-5));
      CHECK(std::abs(o[2]) <= 1.0f);
      left_half += o[0] < 0;
    }
    CHECK(left_half > n / 4);
    CHECK(left_half < 3 * n / 4);
  }
}

TEST_CASE("envs: each env's time limit truncates at exactly its length, and truncation bootstraps") {
  for (const auto& [name, limit] : std::vector<std::pair<std::string, int>>{{"Pendulum-v1", 200}, {"null", 1000}}) {
    const std::string& env = name;  // clang 14 cannot capture a structured binding (CAPTURE's lambda)
    CAPTURE(env);
    VecEnv vec = make_vec(name, 2);
    const std::vector<float> torque(vec.size(), 0.0f);
    for (int t = 1; t <= limit; ++t) {
      REQUIRE((vec.spec().discrete() ? step_all(vec, 0) : vec.step(std::span<const float>(torque))));
      REQUIRE(vec.done(0) == (t == limit));
    }
    CHECK(vec.truncated()[0] == 1);
    CHECK(vec.terminated()[0] == 0);
    CHECK(vec.bootstraps(0));
    CHECK(vec.episode_lengths()[0] == limit);
  }
  CHECK(make_env("CartPole-v1")->spec().max_episode_steps == 500);
  CHECK(make_env("Acrobot-v1")->spec().max_episode_steps == 500);
  CHECK(make_env("MountainCar-v0")->spec().max_episode_steps == 200);
}

TEST_CASE("envs: a terminated episode keeps its last observation apart, is not bootstrapped, and resets alone") {
  VecEnv vec = make_vec("CartPole-v1", 3);
  std::vector<std::int32_t> actions{1, 1, 1};
  int steps = 0;
  while (!vec.done(0)) {
    actions[1] = steps % 2;  // env 1 wobbles in place, so it is still going when env 0 falls
    REQUIRE(vec.step(std::span<const std::int32_t>(actions)));
    REQUIRE(++steps < 500);
  }
  CHECK(vec.terminated()[0] == 1);
  CHECK(vec.truncated()[0] == 0);
  CHECK_FALSE(vec.bootstraps(0));
  CHECK_FALSE(vec.done(1));
  const auto last = row(vec, vec.final_observations(), 0);
  CHECK((std::abs(last[0]) > 2.4f || std::abs(last[2]) > 0.2094f));             // the state that ended it
  for (float v : row(vec, vec.observations(), 0)) CHECK(std::abs(v) <= 0.05f);  // a fresh episode
  CHECK(vec.episode_lengths()[0] == steps);
  CHECK(vec.episode_returns()[0] == doctest::Approx(steps));  // +1 per step, the falling one included
}

TEST_CASE("envs: seeds from (job seed, actor, env index) reproduce a run and never repeat across envs") {
  std::set<std::uint64_t> seeds;
  for (std::uint64_t actor = 0; actor < 64; ++actor)
    for (std::uint64_t env = 0; env < 64; ++env) seeds.insert(env_seed(42, actor, env));
  CHECK(seeds.size() == 64 * 64);
  CHECK(env_seed(42, 0, 0) != env_seed(43, 0, 0));

  VecEnv a = make_vec("CartPole-v1", 4, 42, 5), b = make_vec("CartPole-v1", 4, 42, 5);
  VecEnv other_actor = make_vec("CartPole-v1", 4, 42, 6);
  for (int t = 0; t < 300; ++t) {
    REQUIRE(step_all(a, t % 3 == 0));
    REQUIRE(step_all(b, t % 3 == 0));
  }
  CHECK(std::equal(a.observations().begin(), a.observations().end(), b.observations().begin()));
  CHECK(row(a, a.observations(), 0) != row(a, a.observations(), 1));
  CHECK(row(other_actor, other_actor.observations(), 0) != row(b, b.observations(), 0));
}

TEST_CASE("envs: actions that do not fit the space are refused and step nothing") {
  VecEnv cartpole = make_vec("CartPole-v1", 2);
  const std::vector<float> before(cartpole.observations().begin(), cartpole.observations().end());
  const std::vector<std::int32_t> out_of_range{0, 2}, too_few{0};
  const std::vector<float> continuous{0.0f, 0.0f};
  CHECK_FALSE(cartpole.step(std::span<const std::int32_t>(out_of_range)));
  CHECK_FALSE(cartpole.step(std::span<const std::int32_t>(too_few)));
  CHECK_FALSE(cartpole.step(std::span<const float>(continuous)));
  CHECK(std::equal(before.begin(), before.end(), cartpole.observations().begin()));

  VecEnv pendulum = make_vec("Pendulum-v1", 2);
  const std::vector<std::int32_t> discrete{0, 1};
  CHECK_FALSE(pendulum.step(std::span<const std::int32_t>(discrete)));
  CHECK(pendulum.step(std::span<const float>(continuous)));
}

TEST_CASE("envs: an unknown env name, mixed specs or a policy of another shape get one line naming the fix") {
  CHECK(error_of([] { make_env("CartPole-v0"); }) ==
        "unknown env 'CartPole-v0': choose CartPole-v1, Acrobot-v1, MountainCar-v0, Pendulum-v1, Hopper, Walker2d, "
        "HalfCheetah, Ant, Humanoid, Breakout or null, or load your own with env.plugin");
  std::vector<std::unique_ptr<Env>> mixed;
  mixed.push_back(make_env("CartPole-v1"));
  mixed.push_back(make_env("Acrobot-v1"));
  CHECK(error_of([&] { VecEnv(std::move(mixed), 1, 0); }).find("env 'Acrobot-v1' observes 6 floats") == 0);
  CHECK(error_of([] {
          require_spaces(make_env("Pendulum-v1")->spec(), EnvSpec{"", 3, 2});
        }) ==
        "env 'Pendulum-v1' has continuous actions but the policy expects 2 discrete actions: set the model's "
        "output size to match");
  CHECK(error_of([] { require_spaces(make_env("Pendulum-v1")->spec(), EnvSpec{"", 3, 0, 1}); }).empty());
  CHECK(error_of([] { VecEnv({}, 1, 0); }).find("at least one env") != std::string::npos);
  CHECK(error_of([] {
          VecEnv(std::vector<std::unique_ptr<Env>>(1), 1, 0, 0, 0);
        }).starts_with("a vectorised env of 1 envs steps them on 1 to 1 threads, not 0"));
  std::vector<std::unique_ptr<Env>> two;
  two.push_back(make_env("CartPole-v1"));
  two.push_back(make_env("CartPole-v1"));
  CHECK(error_of([&] { VecEnv(std::move(two), 1, 0, 0, 3); }) ==
        "a vectorised env of 2 envs steps them on 1 to 2 threads, not 3: set env.threads to at most env.envs");
}

TEST_CASE("envs: a VecEnv on 1, 2, 3 or 7 threads steps every env as on one, auto-resets included") {
  auto run = [](int threads) {
    std::vector<std::unique_ptr<Env>> envs;
    envs.reserve(7);
    for (int i = 0; i < 7; ++i) envs.push_back(make_env("CartPole-v1"));
    VecEnv vec(std::move(envs), 9, 2, 0, threads);
    REQUIRE(vec.threads() == threads);
    std::vector<float> trace;
    std::vector<std::int32_t> actions(7);
    for (int t = 0; t < 400; ++t) {
      for (int e = 0; e < 7; ++e) actions[e] = (t * 7 + e * 3) % 5 < 2;
      REQUIRE(vec.step(std::span<const std::int32_t>(actions)));
      trace.insert(trace.end(), vec.observations().begin(), vec.observations().end());
      trace.insert(trace.end(), vec.rewards().begin(), vec.rewards().end());
      for (int e = 0; e < 7; ++e) trace.push_back(vec.done(e) ? static_cast<float>(vec.episode_lengths()[e]) : -1.0f);
    }
    return trace;
  };
  const std::vector<float> one = run(1);
  CHECK(std::count(one.begin(), one.end(), -1.0f) < 7 * 400);  // some episodes ended
  for (int threads : {2, 3, 7}) {
    CAPTURE(threads);
    CHECK(run(threads) == one);
  }
}

namespace {

// CartPole that records the thread stepping it and, on one step in seven (a different env each step),
// sleeps first: the other threads take the envs queued behind it, so envs change threads.
class Sluggish final : public Env {
 public:
  Sluggish(int index, std::thread::id& ran_on) : index_(index), ran_on_(ran_on), inner_(make_env("CartPole-v1")) {}
  const EnvSpec& spec() const override { return inner_->spec(); }
  void reset(Rng& rng, float* obs) override { inner_->reset(rng, obs); }
  StepOut step(ActionRef action, float* obs) override {
    ran_on_ = std::this_thread::get_id();
    if ((++steps_ + index_) % 7 == 0) std::this_thread::sleep_for(std::chrono::microseconds(300));
    return inner_->step(action, obs);
  }

 private:
  int index_, steps_ = 0;
  std::thread::id& ran_on_;
  std::unique_ptr<Env> inner_;
};

}  // namespace

TEST_CASE("envs: a VecEnv whose envs change threads from step to step steps every env as on one thread" *
          doctest::timeout(60)) {
  constexpr int kEnvs = 7, kSteps = 200;
  int moves = 0;
  auto run = [&moves](int threads) {
    std::vector<std::thread::id> ran_on(kEnvs), before(kEnvs);
    std::vector<std::unique_ptr<Env>> envs;
    envs.reserve(kEnvs);
    for (int e = 0; e < kEnvs; ++e) envs.push_back(std::make_unique<Sluggish>(e, ran_on[e]));
    VecEnv vec(std::move(envs), 4, 1, 0, threads);
    std::vector<float> trace;
    std::vector<std::int32_t> actions(kEnvs);
    for (int t = 0; t < kSteps; ++t) {
      for (int e = 0; e < kEnvs; ++e) actions[e] = (t + e * 5) % 3 == 0;
      REQUIRE(vec.step(std::span<const std::int32_t>(actions)));
      trace.insert(trace.end(), vec.observations().begin(), vec.observations().end());
      for (int e = 0; e < kEnvs; ++e) trace.push_back(vec.done(e) ? vec.final_observations()[e * 4] : -9.0f);
      for (int e = 0; e < kEnvs; ++e) moves += t > 0 && ran_on[e] != before[e];
      before = ran_on;
    }
    return trace;
  };
  const std::vector<float> one = run(1);
  for (int threads : {2, 3}) {
    CAPTURE(threads);
    moves = 0;
    CHECK(run(threads) == one);
    CHECK(moves > 0);
  }
}

TEST_CASE("envs: stepping a VecEnv allocates nothing, auto-resets included") {
  for (const std::string name : {"CartPole-v1", "Acrobot-v1", "MountainCar-v0", "Pendulum-v1", "null"}) {
    const std::string& env = name;  // clang 14 cannot capture a structured binding (CAPTURE's lambda)
    CAPTURE(env);
    const long at_start = allocations;
    VecEnv vec = make_vec(name, 8);
    REQUIRE(allocations > at_start);  // the counter sees this binary's allocations
    const std::vector<std::int32_t> discrete(vec.size(), 1);
    const std::vector<float> continuous(vec.size(), 1.0f);
    int episodes = 0;
    const long before = allocations;
    for (int t = 0; t < 1200; ++t) {
      REQUIRE((vec.spec().discrete() ? vec.step(std::span<const std::int32_t>(discrete))
                                     : vec.step(std::span<const float>(continuous))));
      episodes += vec.done(0);
    }
    CHECK(allocations == before);
    CHECK(episodes >= 1);
  }
}

namespace {

// Counts its steps and throws at step `fail_at` when it is one of the failing envs (fail_at > 0).
class Failing final : public Env {
 public:
  Failing(int index, int fail_at) : index_(index), fail_at_(fail_at) {}
  const EnvSpec& spec() const override { return spec_; }
  void reset(Rng&, float* obs) override { obs[0] = 0.0f; }
  StepOut step(ActionRef, float* obs) override {
    if (++steps_ == fail_at_) throw std::runtime_error("env " + std::to_string(index_) + " failed");
    obs[0] = static_cast<float>(steps_);
    return {};
  }

 private:
  EnvSpec spec_{"failing", 1, 2, 0, 0.0f, 0.0f, 0};
  int index_, fail_at_, steps_ = 0;
};

}  // namespace

TEST_CASE("envs: an env that throws on a worker thread fails step() on the owner's, lowest env index first") {
  std::vector<std::unique_ptr<Env>> envs;
  envs.reserve(6);
  for (int e = 0; e < 6; ++e) envs.push_back(std::make_unique<Failing>(e, e == 1 || e == 4 ? 3 : 0));
  VecEnv vec(std::move(envs), 1, 0, 0, 3);  // slices {0, 1}, {2, 3}, {4, 5}; envs 1 and 4 throw at step 3
  REQUIRE(step_all(vec, 0));
  REQUIRE(step_all(vec, 0));
  CHECK(vec.observations()[5] == 2.0f);
  std::string what;
  try {
    (void)step_all(vec, 0);
  } catch (const std::runtime_error& e) {
    what = e.what();
  }
  CHECK(what == "env 1 failed");
}

TEST_CASE("envs: reset with a seed replays the constructor's episodes, reset without one goes on with the streams") {
  VecEnv fresh = make_vec("CartPole-v1", 3, 9, 2);
  VecEnv vec = make_vec("CartPole-v1", 3, 9, 2);
  const std::vector<float> first(fresh.observations().begin(), fresh.observations().end());
  for (int t = 0; t < 40; ++t) REQUIRE(step_all(vec, t % 2 == 0));
  vec.reset(9);
  CHECK(std::equal(first.begin(), first.end(), vec.observations().begin()));
  for (int t = 0; t < 40; ++t) {  // the same episodes, step for step
    REQUIRE(step_all(vec, t % 2 == 0));
    REQUIRE(step_all(fresh, t % 2 == 0));
    REQUIRE(std::equal(fresh.observations().begin(), fresh.observations().end(), vec.observations().begin()));
  }
  vec.reset();
  CHECK_FALSE(std::equal(first.begin(), first.end(), vec.observations().begin()));
  CHECK(vec.rewards()[0] == 0.0f);
  CHECK_FALSE(vec.done(0));
}

TEST_CASE("envs: observe_into makes reset and step write the observations into the caller's rows") {
  VecEnv vec = make_vec("CartPole-v1", 2, 3);
  std::vector<float> mine(8, -99.0f);
  vec.observe_into(mine);
  vec.reset(3);
  CHECK(vec.observations().data() == mine.data());
  CHECK(std::all_of(mine.begin(), mine.end(), [](float x) { return std::abs(x) <= 0.05f; }));
  const std::vector<float> after_reset = mine;
  REQUIRE(step_all(vec, true));
  CHECK(mine != after_reset);
  vec.observe_into({});
  CHECK(vec.observations().data() != mine.data());
  std::vector<float> wrong(7);
  CHECK(error_of([&] { vec.observe_into(wrong); }).find("pass 8") != std::string::npos);
}
