// A real PPO job whose rings hold one update's slots (rl.slots_per_ring = slots_per_update / actors):
// the learner publishes each update's weights before it frees the slots, so the actors, waiting on
// full rings, play every batch with the newest version and the learner trains on-policy.
#include <doctest/doctest.h>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>

#include "tests/rl_job_fixture.hpp"

using namespace tandem;
using namespace std::chrono_literals;

TEST_CASE(
    "a PPO job with rings of one update's slots trains every batch with no policy lag, its processes saying where their time went" *
    doctest::timeout(180)) {
  test::RlJob job("rlonpolicy", 2, R"([env]
name = "hopper"
envs = 4
seed = 0
[model]
name = "actor_critic_mlp"
[learner]
algo = "ppo"
threads = 1
report_every_steps = 10
[checkpoint]
every_steps = 0
[rl]
rollout_steps = 32
slots_per_ring = 1
slots_per_update = 2
total_env_steps = 12800
update_epochs = 2
minibatches = 2
norm_obs = true
[actor]
role = "rollout"
evaluators = 0
)");
  job.start();
  const int rc = job.wait(150s);
  INFO(job.output());
  REQUIRE(rc == 0);
  const auto rows = job.metrics_of("learner.0");
  // The rows are samples of the learner's reports (the launcher writes them on its schedule); every
  // one must say lag 0, and the last is the final update, 12800 / (2 slots x 32 steps x 4 envs).
  int sampled = 0;
  std::uint64_t last_step = 0;
  for (const auto& r : rows) {
    if (!r.contains("policy_lag_max")) continue;
    CAPTURE(r.dump());
    CHECK(r["policy_lag_max"].get<double>() == 0.0);
    last_step = r.value("step", std::uint64_t{0});
    ++sampled;
  }
  CHECK(sampled >= 2);
  CHECK(last_step == 50);

  // Shares of each report window: parts of one wall clock, so each in [0, 1] and an actor's three
  // together at most 1 (timer granularity aside). On policy, the actors wait on their full rings
  // while the learner updates, and the learner waits for slots while they act.
  auto share = [](const nlohmann::json& r, const char* key) {
    const double v = r.value(key, -1.0);
    CHECK(v >= 0.0);
    CHECK(v <= 1.0);
    return v;
  };
  double learner_wait = 0, actor_wait = 0;
  for (const auto& r : rows)
    if (r.contains("wait_share"))
      share(r, "compute_share"), learner_wait = std::max(learner_wait, share(r, "wait_share"));
  for (const auto& r : job.metrics_of("actor.0")) {
    if (!r.contains("env_share")) continue;
    CAPTURE(r.dump());
    const double wait = share(r, "wait_share");
    CHECK(share(r, "env_share") + share(r, "compute_share") + wait <= 1.05);
    actor_wait = std::max(actor_wait, wait);
  }
  CHECK(learner_wait > 0.0);
  CHECK(actor_wait > 0.0);
}
