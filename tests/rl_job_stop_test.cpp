// Ctrl-C during a real PPO job's start-up (a rollout actor and an evaluator waiting for the learner's
// segments, the learner still loading): whenever it comes, the launcher exits 130 saying the job
// was stopped, and nothing is left in /dev/shm.
#include <doctest/doctest.h>
#include <signal.h>

#include <fmt/format.h>

#include <chrono>
#include <string>
#include <thread>

#include "tests/rl_job_fixture.hpp"

using namespace tandem;
using namespace std::chrono_literals;

namespace {

const std::string kPpoJob = R"([env]
name = "cartpole"
envs = 4
[model]
name = "actor_critic_mlp"
[learner]
algo = "ppo"
threads = 1
[checkpoint]
every_steps = 0
[rl]
rollout_steps = 16
slots_per_ring = 2
slots_per_update = 1
total_env_steps = 10000000
stop_on_return = false
[actor]
role = "rollout"
evaluators = 1
)";

}  // namespace

TEST_CASE("a real job interrupted at any moment of its start-up exits 130, stopped, with nothing left" *
          doctest::timeout(240)) {
  for (const auto after : {0ms, 100ms, 300ms, 1000ms}) {
    CAPTURE(after.count());
    test::RlJob job("rlstop", 2, kPpoJob);
    job.start();
    // The launcher's first line: from here on it handles the signal (before, SIGINT ends it as any program).
    const auto deadline = std::chrono::steady_clock::now() + 60s;
    while (job.output().find(fmt::format("job {}:", job.id())) == std::string::npos &&
           std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(5ms);
    std::this_thread::sleep_for(after);
    job.interrupt();
    const int rc = job.wait(60s);
    const std::string out = job.output();
    INFO(out);
    CHECK(rc == 130);
    CHECK(out.find(fmt::format("job {} stopped by SIGINT", job.id())) != std::string::npos);
    CHECK(out.find(fmt::format("job {} failed", job.id())) == std::string::npos);
    CHECK(out.find("while still starting") == std::string::npos);  // each exited 0: stopped on request
    CHECK(job.segments_left().empty());
  }
}
