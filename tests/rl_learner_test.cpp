// The RL learner (learner/rl) on CPUs against an in-test producer (rl_learner_harness.hpp), and its
// update on its own.
#include "tests/torch_doctest.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/types.h>

#include <cmath>

#include "common/program.hpp"
#include "common/torch/rl_model.hpp"
#include "envs/env_source.hpp"
#include "learner/rl/rl_setup.hpp"
#include "learner/rl/update.hpp"
#include "learner/trainer.hpp"
#include "tests/rl_learner_harness.hpp"

using namespace tandem;
using namespace tandem::test;

TEST_CASE("rl learner: PPO and V-trace train on the rings' slots, report lag and episodes, and skip a corrupt slot" *
          doctest::timeout(120)) {
  for (const std::string algo : {"ppo", "vtrace"}) {
    CAPTURE(algo);
    TempDir dir;
    const std::string config = write_config(dir, algo);
    const LearnerRun run = run_learner(dir, config, 2, true);
    REQUIRE(run.status == 0);
    CHECK(run.refused == 1);
    REQUIRE(run.metrics);
    CHECK(run.metrics->env_steps == 1024);  // the budget, from good slots only
    CHECK(run.metrics->step == 8);          // 1024 / (2 slots x 16 steps x 4 envs)
    CHECK(std::isfinite(run.metrics->episode_return));
    CHECK(run.metrics->episode_length > 5);
    // Every slot says version 1; the learner holds version 8 (1 + 7 updates) when it takes its last batch.
    CHECK(run.metrics->policy_lag_min == 7);
    CHECK(run.metrics->policy_lag_max == 7);
    CHECK(run.metrics->policy_lag_avg == 7);
    REQUIRE_FALSE(run.checkpoint.empty());
    CHECK(distance_from_initial(run.checkpoint, config) > 1e-4);
  }
}

TEST_CASE("rl learner: deterministic mode gives byte-identical final checkpoints over the same slots" *
          doctest::timeout(120)) {
  std::string first;
  for (int round = 0; round < 2; ++round) {
    TempDir dir;
    const LearnerRun run = run_learner(dir, write_config(dir, "ppo"), 2, false, true);
    REQUIRE(run.status == 0);
    REQUIRE_FALSE(run.checkpoint.empty());
    const std::string bytes = file_bytes(run.checkpoint);
    if (round == 0) first = bytes;
    else CHECK(bytes == first);
  }
}

TEST_CASE("rl learner: 2 CPU ranks, each on its own actor's ring, end with one rank's weights over both rings" *
          doctest::timeout(120)) {
  check_ranks_learn_as_one_rank("cpu", 1e-5);  // 1e-7 when written
}

TEST_CASE("rl learner: deterministic mode refuses a batch that does not divide among the rollout actors") {
  TempDir dir;
  const LearnerRun run = run_learner(dir, write_config(dir, "ppo"), 3, false, true);
  CHECK(run.status == 2);  // slots_per_update = 2 over 3 actors
  CHECK(run.checkpoint.empty());
}

TEST_CASE("rl learner: a model without a value head is refused naming the model and the env") {
  const ModelSettings mlp{.name = "mlp"};
  const envs::EnvSpec env = envs::make_env("CartPole-v1")->spec();
  const std::string error = error_of([&] { make_rl_model(mlp, RlSettings{}, env); });
  CHECK(error.find("model 'mlp'") != std::string::npos);
  CHECK(error.find("CartPole-v1") != std::string::npos);
}

TEST_CASE("rl learner: PPO and V-trace updates take continuous (Gaussian) actions") {
  TempDir dir;
  for (const std::string algo : {"ppo", "vtrace"}) {
    CAPTURE(algo);
    const JobSettings settings = JobSettings::parse(
        load_program_config(write_config(dir, algo), std::vector<std::string>{"env.name=pendulum", "rl.minibatches=2"}),
        {});
    const envs::EnvSpec env = envs::EnvSource(settings.env).spec();
    const PolicyHead head = policy_head_for(env);
    REQUIRE(head.is_continuous());
    Model model = make_rl_model(settings.model, settings.rl, env);
    const torch::Tensor before = model.parameters().front().flatten().clone();
    Optimizer optimizer(model.named_parameters(), {.kind = "adam", .lr = 1e-3, .weight_decay = 0});
    rl::RlUpdater updater(model, head, optimizer, settings.learner.algo, settings.rl,
                          at::detail::createCPUGenerator(0));
    const std::int64_t T = 8, N = 4;
    rl::Batch b{torch::randn({T + 1, N, 3}),
                torch::randn({T, N, 3}),
                torch::randn({T, N, 1}),
                torch::randn({T, N}),
                (torch::rand({T, N}) < 0.1).to(torch::kUInt8),
                (torch::rand({T, N}) < 0.2).to(torch::kUInt8),
                torch::full({T, N}, -1.0f)};
    const rl::UpdateStats st = updater.update(b, 1e-3);
    CHECK(std::isfinite(st.loss));
    CHECK(std::isfinite(st.entropy));
    CHECK((model.parameters().front().flatten() - before).abs().max().item<double>() > 0);
  }
}

TEST_CASE("rl learner: learner.cuda_graph says why an update stays eager: a CPU model, learner ranks") {
  TempDir dir;
  const JobSettings settings = JobSettings::parse(load_program_config(write_config(dir, "ppo"), {}), {});
  const envs::EnvSpec env = envs::EnvSource(settings.env).spec();
  Model model = make_rl_model(settings.model, settings.rl, env);
  Optimizer optimizer(model.named_parameters(), {.kind = "adam", .lr = 1e-3, .weight_decay = 0});
  auto why = [&](Algo algo, bool ranks) {
    rl::RlUpdater updater(model, policy_head_for(env), optimizer, algo, settings.rl, at::detail::createCPUGenerator(0));
    if (ranks) updater.set_after_backward([] {});
    return updater.capture_updates().value_or("captured");
  };
  CHECK(why(Algo::ppo, false).find("the learner trains on the CPU") == 0);
  CHECK(why(Algo::vtrace, false).find("the learner trains on the CPU") == 0);
  CHECK(why(Algo::ppo, true).find("learner ranks synchronise") == 0);
}
