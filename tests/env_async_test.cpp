// AsyncVecEnv's contract (envs/async_vec_env.hpp): each env's trajectory is VecEnv's whatever the batch
// size, thread count or finishing order; a batch is the first envs to finish; misuse is one line.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <stdexcept>
#include <string>
#include <thread>

#include "envs/async_vec_env.hpp"
#include "envs/vec_env.hpp"
#include "tests/harness.hpp"

using namespace tandem::envs;
using namespace tandem::test;

namespace {

std::vector<std::unique_ptr<Env>> envs_named(const std::string& name, int n) {
  std::vector<std::unique_ptr<Env>> envs;
  envs.reserve(n);
  for (int e = 0; e < n; ++e) envs.push_back(make_env(name));
  return envs;
}

// The action env e takes at its step t: a fixed pattern, so both engines see the same ones per env.
float action_value(int e, int t) { return static_cast<float>((t * 7 + e * 3) % 5) / 2.0f - 1.0f; }
std::int32_t action_index(int e, int t) { return (t * 7 + e * 3) % 5 < 2; }

// Env e's record: after its reset and after each step, the observation, the reward, the end flags
// and, where an episode ended, its final observation's first value and its length.
using Trace = std::map<int, std::vector<float>>;

void record(Trace& trace, int e, std::span<const float> obs, float reward, bool terminated, bool truncated,
            float final_first, std::int32_t length) {
  std::vector<float>& t = trace[e];
  t.insert(t.end(), obs.begin(), obs.end());
  t.push_back(reward);
  t.push_back(terminated);
  t.push_back(truncated);
  t.push_back(terminated || truncated ? final_first : 0.0f);
  t.push_back(terminated || truncated ? static_cast<float>(length) : 0.0f);
}

Trace sync_trace(const std::string& name, int n, int steps) {
  VecEnv vec(envs_named(name, n), 5, 0);
  const int dim = vec.spec().obs_dim, adim = vec.spec().action_dim;
  Trace trace;
  for (int e = 0; e < n; ++e) record(trace, e, vec.observations().subspan(e * dim, dim), 0, false, false, 0, 0);
  std::vector<std::int32_t> indices(n);
  std::vector<float> values(static_cast<std::size_t>(n * std::max(adim, 1)));
  for (int t = 0; t < steps; ++t) {
    for (int e = 0; e < n; ++e) {
      indices[e] = action_index(e, t);
      for (int j = 0; j < adim; ++j) values[e * adim + j] = action_value(e, t + j);
    }
    REQUIRE((vec.spec().discrete() ? vec.step(std::span<const std::int32_t>(indices))
                                   : vec.step(std::span<const float>(values))));
    for (int e = 0; e < n; ++e)
      record(trace, e, vec.observations().subspan(e * dim, dim), vec.rewards()[e], vec.terminated()[e],
             vec.truncated()[e], vec.final_observations()[e * dim], vec.episode_lengths()[e]);
  }
  return trace;
}

// Every env steps until each has at least `steps` steps recorded (envs keep being sent past it, so
// fewer than M envs are never left stepping); each env's record is then cut to its first `steps`.
Trace async_trace(const std::string& name, int n, int steps, int batch, int threads) {
  AsyncVecEnv vec(envs_named(name, n), batch, threads, 5);
  const int dim = vec.spec().obs_dim, adim = vec.spec().action_dim;
  Trace trace;
  std::vector<int> taken(n, -1);  // steps each env has been sent (-1: its reset is in flight)
  vec.reset();
  std::vector<std::int32_t> ids, indices;
  std::vector<float> values;
  while (*std::min_element(taken.begin(), taken.end()) < steps) {
    const AsyncBatch b = vec.recv();
    REQUIRE(b.env_ids.size() == static_cast<std::size_t>(batch));
    ids.clear();
    indices.clear();
    values.clear();
    for (int i = 0; i < batch; ++i) {
      const int e = b.env_ids[i];
      record(trace, e, b.observations.subspan(i * dim, dim), b.rewards[i], b.terminated[i], b.truncated[i],
             b.final_observations[i * dim], b.episode_lengths[i]);
      const int t = ++taken[e];
      ids.push_back(e);
      indices.push_back(action_index(e, t));
      for (int j = 0; j < adim; ++j) values.push_back(action_value(e, t + j));
    }
    if (vec.spec().discrete()) vec.send(std::span<const std::int32_t>(indices), ids);
    else vec.send(std::span<const float>(values), ids);
  }
  const std::size_t per_record = static_cast<std::size_t>(dim) + 5;
  for (auto& [e, t] : trace) t.resize(per_record * (steps + 1));
  return trace;
}

}  // namespace

TEST_CASE("envs: an async env steps each env as VecEnv does, whatever the batch size, threads or order") {
  for (const std::string name : {"CartPole-v1", "Pendulum-v1", "Hopper"}) {
    const std::string& env = name;  // clang 14 cannot capture a structured binding (CAPTURE's lambda)
    CAPTURE(env);
    const int steps = name == "Pendulum-v1" ? 420 : 150;  // Pendulum truncates at 200 steps
    const Trace want = sync_trace(name, 8, steps);
    const std::vector<float>& env0 = want.at(0);
    const std::size_t flags = static_cast<std::size_t>(make_env(name)->spec().obs_dim) + 1;
    int ends = 0;  // env 0's episodes that ended in the compared steps: auto-reset is compared too
    for (std::size_t i = flags; i + 1 < env0.size(); i += flags + 4) ends += env0[i] + env0[i + 1] > 0;
    CHECK(ends > 0);
    for (const auto& shape : std::vector<std::pair<int, int>>{{8, 1}, {4, 2}, {3, 3}, {1, 4}, {2, 8}}) {
      const int batch = shape.first, threads = shape.second;  // clang 14 cannot capture structured bindings
      CAPTURE(batch);
      CAPTURE(threads);
      const Trace got = async_trace(name, 8, steps, batch, threads);
      REQUIRE(got.size() == want.size());
      for (int e = 0; e < 8; ++e) {
        CAPTURE(e);
        CHECK(got.at(e) == want.at(e));
      }
    }
  }
}

namespace {

// CartPole that sleeps `delay` in every step.
class Slow final : public Env {
 public:
  explicit Slow(std::chrono::milliseconds delay) : delay_(delay), inner_(make_env("CartPole-v1")) {}
  const EnvSpec& spec() const override { return inner_->spec(); }
  void reset(Rng& rng, float* obs) override { inner_->reset(rng, obs); }
  StepOut step(ActionRef action, float* obs) override {
    std::this_thread::sleep_for(delay_);
    return inner_->step(action, obs);
  }

 private:
  std::chrono::milliseconds delay_;
  std::unique_ptr<Env> inner_;
};

}  // namespace

TEST_CASE("envs: an async batch is the first envs to finish, so a slow env holds up no batch" * doctest::timeout(60)) {
  std::vector<std::unique_ptr<Env>> envs;
  envs.push_back(std::make_unique<Slow>(std::chrono::milliseconds(400)));
  for (int e = 1; e < 4; ++e) envs.push_back(std::make_unique<Slow>(std::chrono::milliseconds(0)));
  AsyncVecEnv vec(std::move(envs), 2, 2, 1);
  vec.reset();
  std::vector<std::int32_t> ids;
  for (int b = 0; b < 2; ++b) {  // the resets: each batch's envs go on to a step
    const AsyncBatch batch = vec.recv();
    ids.assign(batch.env_ids.begin(), batch.env_ids.end());
    vec.send(std::vector<std::int32_t>(2, 0), ids);
  }
  // Env 0 is stepping (400 ms); the fast envs come back batch after batch meanwhile.
  int fast_batches = 0;
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    const AsyncBatch batch = vec.recv();
    ids.assign(batch.env_ids.begin(), batch.env_ids.end());
    if (std::find(ids.begin(), ids.end(), 0) != ids.end()) break;
    ++fast_batches;
    vec.send(std::vector<std::int32_t>(ids.size(), 1), ids);
  }
  CHECK(fast_batches >= 20);
  CHECK(std::chrono::steady_clock::now() - start >= std::chrono::milliseconds(300));
}

TEST_CASE("envs: an async env refuses misuse in one line and queues nothing") {
  CHECK(error_of([] { AsyncVecEnv(envs_named("CartPole-v1", 4), 5, 1, 0); }).find("use 1..4") != std::string::npos);
  CHECK(error_of([] { AsyncVecEnv(envs_named("CartPole-v1", 4), 2, 5, 0); }).find("not 5") != std::string::npos);
  AsyncVecEnv vec(envs_named("CartPole-v1", 4), 2, 2, 0);
  const std::vector<std::int32_t> two{0, 1}, zero_zero{0, 0};
  CHECK(error_of([&] { vec.send(two, two); }).find("before reset()") != std::string::npos);
  vec.reset();
  CHECK(error_of([&] { vec.reset(); }).find("recv() their batches first") != std::string::npos);
  const AsyncBatch first = vec.recv();
  const std::vector<std::int32_t> got(first.env_ids.begin(), first.env_ids.end());
  CHECK(error_of([&] {
          vec.send(two, std::vector<std::int32_t>{got[0], 7});
        }).find("env id 7 is out of range") != std::string::npos);
  CHECK(error_of([&] {
          vec.send(zero_zero, std::vector<std::int32_t>{got[0], got[0]});
        }).find("is still in flight") != std::string::npos);
  CHECK(error_of([&] { vec.send(std::vector<std::int32_t>{0, 2}, got); }).find("out of range") != std::string::npos);
  CHECK(error_of([&] { vec.send(std::vector<std::int32_t>{0}, got); }).find("1 actions for 2") != std::string::npos);
  CHECK(error_of([&] { vec.send(std::vector<float>{0.5f, 0.5f}, got); }).find("not values") != std::string::npos);
  CHECK(vec.in_flight() == 2);  // the refused sends queued nothing
  (void)vec.recv();             // the other two resets
  CHECK(vec.in_flight() == 0);
  CHECK(error_of([&] { (void)vec.recv(); }).find("would wait for ever") != std::string::npos);
  vec.send(zero_zero, got);  // the ids the refused sends named are still free
  CHECK(vec.in_flight() == 2);
}

namespace {

// Throws at its `fail_at`-th step when fail_at > 0.
class Failing final : public Env {
 public:
  explicit Failing(int fail_at) : fail_at_(fail_at) {}
  const EnvSpec& spec() const override { return spec_; }
  void reset(Rng&, float* obs) override { obs[0] = 0.0f; }
  StepOut step(ActionRef, float* obs) override {
    if (++steps_ == fail_at_) throw std::runtime_error("env failed at step " + std::to_string(steps_));
    obs[0] = static_cast<float>(steps_);
    return {};
  }

 private:
  EnvSpec spec_{"failing", 1, 2, 0, 0.0f, 0.0f, 0};
  int fail_at_, steps_ = 0;
};

}  // namespace

TEST_CASE("envs: an env that throws fails the async env's recv(), and the env is refused after it") {
  std::vector<std::unique_ptr<Env>> envs;
  envs.reserve(4);
  for (int e = 0; e < 4; ++e) envs.push_back(std::make_unique<Failing>(e == 2 ? 3 : 0));
  AsyncVecEnv vec(std::move(envs), 4, 2, 0);
  vec.reset();
  const std::vector<std::int32_t> all{0, 1, 2, 3}, actions(4, 0);
  (void)vec.recv();
  std::string what;
  for (int t = 0; t < 3 && what.empty(); ++t) {
    vec.send(actions, all);
    try {
      (void)vec.recv();
    } catch (const std::runtime_error& e) {
      what = e.what();
    }
  }
  CHECK(what == "env failed at step 3");
  CHECK(error_of([&] { vec.send(actions, all); }).find("cannot step again") != std::string::npos);
}

TEST_CASE("envs: observe_into makes an async batch buffer write its observations into the caller's rows") {
  std::vector<std::vector<float>> mine(4, std::vector<float>(8, -99.0f));  // outlive the env: its workers write them
  std::vector<float> fresh(8, -99.0f);
  AsyncVecEnv vec(envs_named("CartPole-v1", 4), 2, 2, 3);
  REQUIRE(vec.buffers() <= 4);
  for (int b = 0; b < vec.buffers(); ++b) vec.observe_into(b, mine[b]);
  std::vector<float> wrong(7);
  CHECK(error_of([&] { vec.observe_into(0, wrong); }).find("pass 8") != std::string::npos);
  vec.reset();
  const AsyncBatch first = vec.recv();
  CHECK(first.observations.data() == mine[first.buffer].data());
  CHECK(
      std::all_of(mine[first.buffer].begin(), mine[first.buffer].end(), [](float x) { return std::abs(x) <= 0.05f; }));
  const int other = (first.buffer + 1) % vec.buffers();
  CHECK(error_of([&] { vec.observe_into(other, mine[other]); }).find("may be in use") != std::string::npos);
  vec.observe_into(first.buffer, fresh);
}
