// A user's env plugin in a whole job, loaded with dlopen by the rollout actors and the learner: the
// example corridor (examples/plugin_env) is learned, and a plugin that crashes in step fails the job
// in one headline line naming the process, the signal and the plugin, with nothing left in /dev/shm.
#include <doctest/doctest.h>

#include <fmt/format.h>

#include <string>

#include "tests/rl_job_fixture.hpp"

using namespace tandem;
using namespace std::chrono_literals;

namespace {

std::string plugin_job(const std::string& plugin, std::uint64_t budget) {
  return fmt::format(R"([env]
name = "plugin"
plugin = "{}"
envs = 8
seed = 0
[model]
name = "actor_critic_mlp"
[learner]
algo = "ppo"
threads = 1
[checkpoint]
every_steps = 0
[rl]
rollout_steps = 32
slots_per_ring = 4
slots_per_update = 2
total_env_steps = {}
stop_on_return = true
stop_return = 0.9
[actor]
role = "rollout"
evaluators = 0
)",
                     plugin, budget);
}

}  // namespace

// The corridor (length 10, start uniform in cells 2..6, +1 at cell 9, -0.01 per other step, 100-step
// limit): a uniformly random walker averages a return of about 0.27 (mean length 51, 23% of episodes
// cut at 100 steps: simulated, 1e5 episodes); always stepping right averages 0.96 (5 steps). A mean
// of 0.9 over the last 100 episodes needs a mean length under 11, i.e. stepping right with
// probability >= ~0.73: only a policy that learned the corridor gets there.
TEST_CASE("the plugin example trains through dlopen" * doctest::timeout(180)) {
  test::RlJob job("rlplugin", 2, plugin_job(test::required_env("TANDEM_CORRIDOR_PLUGIN"), 400'000));
  job.start();
  const int rc = job.wait(150s);
  const std::string out = job.output();
  INFO(out);
  CHECK(rc == 0);
  CHECK(out.find("libcorridor_env") != std::string::npos);  // the actors did load the plugin
  CHECK(out.find("solved: mean return") != std::string::npos);
  const auto learner = job.metrics_of("learner.0");
  REQUIRE(!learner.empty());
  const double mean_return = learner.back().value("episode_return", -1.0);
  CAPTURE(mean_return);
  CHECK(mean_return >= 0.9);
  CHECK(learner.back().value("env_steps", std::uint64_t{0}) < 400'000u);  // learned, not ran out of budget
  CHECK(job.segments_left().empty());
}

TEST_CASE(
    "a job whose env plugin crashes in step fails in one line naming the actor, the signal and the plugin, "
    "leaving nothing in /dev/shm" *
    doctest::timeout(120)) {
  test::RlJob job("rlcrash", 2, plugin_job(test::required_env("TANDEM_CRASH_PLUGIN"), 100'000));
  job.start();
  const int rc = job.wait(90s);
  const std::string out = job.output();
  INFO(out);
  CHECK(rc == 1);
  // The headline: "tandem: job <id> failed after <t>: actor.N (pid P) was killed by SIGSEGV 3 times in a
  // row, the same way each time: restarting it again would not help; the actor died by signal 11
  // (SIGSEGV) inside env plugin '<path>': fix the plugin, ...; its last 3 lines:"
  const auto at = out.find(fmt::format("job {} failed", job.id()));
  REQUIRE(at != std::string::npos);
  const std::string headline = out.substr(at, out.find('\n', at) - at);
  CAPTURE(headline);
  CHECK(headline.find("actor.") != std::string::npos);
  CHECK(headline.find("SIGSEGV") != std::string::npos);
  CHECK(headline.find("restarting it again would not help") != std::string::npos);  // not a restart loop
  CHECK(headline.find("inside env plugin '" + test::required_env("TANDEM_CRASH_PLUGIN") + "': fix the plugin") !=
        std::string::npos);
  CHECK(out.find("succeeded") == std::string::npos);
  CHECK(job.segments_left().empty());
}
