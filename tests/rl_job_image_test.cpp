// An image env in a whole job: Breakout's 4 x 10 x 10 frames through the rings, actor_critic_cnn in
// the rollout actor, the evaluator and the learner; and the one setting it refuses.
#include <doctest/doctest.h>

#include <fmt/format.h>

#include <cmath>
#include <string>

#include "tests/rl_job_fixture.hpp"

using namespace tandem;
using namespace std::chrono_literals;

namespace {

std::string breakout_job(const std::string& algo) {
  return fmt::format(R"([env]
name = "breakout"
envs = 8
seed = 0
[model]
name = "actor_critic_cnn"
[learner]
algo = "{}"
threads = 1
[checkpoint]
every_steps = 0
[rl]
rollout_steps = 32
slots_per_ring = 2
slots_per_update = 1
minibatches = 2
total_env_steps = 4096
stop_on_return = false
[actor]
role = "rollout"
evaluators = 1
eval_episodes = 4
)",
                     algo);
}

}  // namespace

TEST_CASE("an image env trains a convolutional policy through a whole job, PPO and V-trace" * doctest::timeout(180)) {
  for (const std::string algo : {"ppo", "vtrace"}) {
    CAPTURE(algo);
    test::RlJob job("rlimage", 2, breakout_job(algo));
    job.start();
    const int rc = job.wait(120s);
    const std::string out = job.output();
    INFO(out);
    CHECK(rc == 0);
    const auto learner = job.metrics_of("learner.0");
    REQUIRE(!learner.empty());
    CHECK(learner.back().value("env_steps", std::uint64_t{0}) == 4096u);  // 16 updates of 32 x 8 frames
    CHECK(std::isfinite(learner.back().value("loss", NAN)));
    CHECK(learner.back().value("episode_length", 0.0) >= 6.0);  // Breakout's shortest episode
    CHECK(!job.metrics_of("actor.1").empty());                  // the evaluator played its versions
    CHECK(job.checkpoints().size() == 1);
    CHECK(job.segments_left().empty());
  }
}

TEST_CASE("a convolutional policy with observation normalisation is refused in one line, before the job starts" *
          doctest::timeout(60)) {
  test::RlJob job("rlimagenorm", 2, breakout_job("ppo"));
  job.start({"rl.norm_obs=true"});
  const int rc = job.wait(40s);
  const std::string out = job.output();
  INFO(out);
  CHECK(rc != 0);
  CHECK(out.find("rl.norm_obs = true normalises inside actor_critic_mlp, not model.name = \"actor_critic_cnn\"") !=
        std::string::npos);
  CHECK(out.find("succeeded") == std::string::npos);
  CHECK(job.segments_left().empty());
}
