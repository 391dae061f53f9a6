// A real PPO job on CartPole with two rollout actors, one SIGKILLed mid-run: the launcher restarts
// it, the restarted actor reattaches to its ring and keeps feeding the learner, the job finishes its
// env-step budget and succeeds with nothing left in /dev/shm.
#include <doctest/doctest.h>
#include <signal.h>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>

#include "tests/rl_job_fixture.hpp"

using namespace tandem;
using namespace std::chrono_literals;

namespace {

constexpr std::uint64_t kBudget = 150'000;  // env steps: ~15 s here, long enough to kill an actor mid-run

std::string ppo_job(std::uint64_t budget) {
  return fmt::format(R"([env]
name = "cartpole"
envs = 8
seed = 0
[model]
name = "actor_critic_mlp"
[learner]
algo = "ppo"
threads = 1
report_every_steps = 20
[checkpoint]
every_steps = 0
[rl]
rollout_steps = 32
slots_per_ring = 4
slots_per_update = 2
total_env_steps = {}
stop_on_return = false
[actor]
role = "rollout"
evaluators = 0
)",
                     budget);
}

std::uint64_t env_steps_of(const shm::ProcessSnapshot& s) { return s.metrics ? s.metrics->env_steps : 0; }

}  // namespace

TEST_CASE("a rollout actor killed in a real job is restarted, learning continues, the job succeeds" *
          doctest::timeout(240)) {
  test::RlJob job("rlkill", 2, ppo_job(kBudget));
  job.start();
  // Rows: 0 learner.0, 1 actor.0, 2 actor.1. Kill actor.0 once the learner has consumed a quarter.
  std::int32_t victim = 0;
  std::uint64_t learner_at_kill = 0;
  REQUIRE(job.wait_until(
      [&](const shm::ControlBlock& b) {
    const auto actor = b.snapshot(1);
    victim = actor.pid;
    learner_at_kill = env_steps_of(b.snapshot(0));
    return actor.state == shm::ProcessState::running && env_steps_of(actor) > 0 && learner_at_kill >= kBudget / 4;
      },
      120s));
  REQUIRE(victim > 0);
  REQUIRE(learner_at_kill < kBudget);  // mid-run: the learner has work left
  ::kill(victim, SIGKILL);
  const bool restarted = job.wait_until([&](const shm::ControlBlock& b) { return b.snapshot(1).restarts >= 1; }, 30s);
  const int rc = job.wait(180s);
  const std::string out = job.output();
  INFO(out);
  CHECK(restarted);
  CHECK(rc == 0);
  CHECK(out.find("restart") != std::string::npos);  // the launcher said what it did

  // metrics.jsonl: actor.0 ends with restarts = 1, and its env steps went on growing after the restart
  // (the restarted actor continued at its ring's head rather than from 0 or not at all).
  const auto rows = job.metrics_of("actor.0");
  REQUIRE(!rows.empty());
  CHECK(rows.back().value("restarts", -1) == 1);
  std::uint64_t before = 0, after = 0;
  for (const auto& r : rows) {
    const std::uint64_t steps = r.value("env_steps", std::uint64_t{0});
    std::uint64_t& most = r.value("restarts", 0) == 0 ? before : after;
    most = std::max(most, steps);
  }
  CAPTURE(before);
  CAPTURE(after);
  CHECK(before > 0);
  CHECK(after > before);
  for (const auto& r : job.metrics_of("actor.1")) CHECK(r.value("restarts", -1) == 0);  // only the victim

  // The learner consumed its whole budget, most of it after the kill.
  const auto learner = job.metrics_of("learner.0");
  REQUIRE(!learner.empty());
  CHECK(learner.back().value("env_steps", std::uint64_t{0}) >= kBudget);
  CHECK(learner_at_kill < kBudget);
  CHECK(out.find("finished at update") != std::string::npos);
  CHECK(job.segments_left().empty());
}

TEST_CASE("a learner rank killed in a two-rank RL job fails the job within seconds, naming it" *
          doctest::timeout(120)) {
  test::RlJob job("rlrankkill", 2, ppo_job(10'000'000));
  job.start({"run.learners=2"});
  // Rows: 0 learner.0, 1 learner.1, 2 actor.0, 3 actor.1. Kill rank 1 once both ranks are learning.
  std::int32_t victim = 0;
  REQUIRE(job.wait_until(
      [&](const shm::ControlBlock& b) {
    victim = b.snapshot(1).pid;
    return env_steps_of(b.snapshot(0)) > 0 && env_steps_of(b.snapshot(1)) > 0;
      },
      60s));
  REQUIRE(victim > 0);
  const auto killed = std::chrono::steady_clock::now();
  ::kill(victim, SIGKILL);
  const int rc = job.wait(60s);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count();
  const std::string out = job.output();
  INFO(out);
  CHECK(rc != 0);
  CHECK(seconds < 10.0);
  CHECK(out.find("learner.1") != std::string::npos);
  CHECK(job.segments_left().empty());
}
