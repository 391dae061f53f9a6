// Deterministic mode end to end: `tandem run` with run.deterministic = true, one learner and two
// rollout actors as separate processes, twice: the final checkpoints are byte-identical, whatever the
// scheduling of the processes and whatever env.threads; another env.seed gives another checkpoint
// (the comparison can fail).
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "tests/rl_job_fixture.hpp"

using namespace tandem;
using namespace std::chrono_literals;

namespace {

// 16 PPO updates of 2 slots (one per actor) of 32 steps x 8 CartPoles: a few seconds.
constexpr const char* kJob = R"([env]
name = "cartpole"
envs = 8
seed = 0
[model]
name = "actor_critic_mlp"
[learner]
algo = "ppo"
[checkpoint]
every_steps = 0
[rl]
rollout_steps = 32
slots_per_ring = 4
slots_per_update = 2
total_env_steps = 8192
stop_on_return = false
[actor]
role = "rollout"
evaluators = 0
)";

// Runs the job to its end and returns its final checkpoint's bytes.
std::string final_checkpoint(const std::vector<std::string>& sets = {}, const std::string& expect_line = "") {
  // [run] is the fixture's: run.deterministic comes in through --set.
  test::RlJob job("rldet", 2, kJob);
  std::vector<std::string> all = {"run.deterministic=true"};
  all.insert(all.end(), sets.begin(), sets.end());
  job.start(all);
  const int rc = job.wait(120s);
  const std::string out = job.output();
  INFO(out);
  CHECK(rc == 0);
  CHECK(out.find("deterministic") != std::string::npos);  // the learner ran in lockstep
  CHECK(out.find(expect_line) != std::string::npos);
  CHECK(job.segments_left().empty());
  const auto ckpts = job.checkpoints();
  REQUIRE(ckpts.size() == 1);
  CHECK(ckpts[0].filename().string() == "ckpt-000000000016.safetensors");
  return test::file_bytes(ckpts[0]);
}

}  // namespace

TEST_CASE("deterministic mode: two runs give byte-identical final checkpoints" * doctest::timeout(300)) {
  const std::string first = final_checkpoint();
  const std::string second = final_checkpoint();
  REQUIRE(!first.empty());
  CHECK(first.size() == second.size());
  CHECK(first == second);  // each run has its own job id and run dir: neither is in the file
  const std::string other_seed = final_checkpoint({"env.seed=1"});
  CHECK(other_seed.size() == first.size());
  CHECK(other_seed != first);
}

TEST_CASE("deterministic mode: env.threads changes nothing in the checkpoint, CartPole or MuJoCo Hopper" *
          doctest::timeout(300)) {
  const std::string cartpole = final_checkpoint();
  CHECK(final_checkpoint({"env.threads=4"}, "steps of 'CartPole-v1' on 4 threads") == cartpole);
  const std::string hopper = final_checkpoint({"env.name=hopper"});
  CHECK(final_checkpoint({"env.name=hopper", "env.threads=3"}, "steps of 'Hopper' on 3 threads") == hopper);
  CHECK(hopper.size() != cartpole.size());  // a continuous policy of other shapes: a real Hopper run
}
