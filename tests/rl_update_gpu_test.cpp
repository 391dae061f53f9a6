// The RL update captured in a CUDA graph (learner.cuda_graph, learner/rl/update.hpp) against the same
// updates run eagerly on the same GPU: the same weights and losses, PPO and V-trace, for a discrete
// and a continuous policy. Both draw the minibatch order on the device from the same seed.
#include "tests/torch_doctest.hpp"

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>

#include "common/torch/rl_model.hpp"
#include "envs/env_source.hpp"
#include "learner/rl/update.hpp"
#include "tests/actor_rollout_fixture.hpp"
#include "tests/harness.hpp"

TANDEM_GPU_TEST_BINARY();

#ifdef TANDEM_TORCH_CUDA
using namespace tandem;

namespace {

struct Updated {
  std::vector<torch::Tensor> params;  // on the CPU, after the updates
  std::vector<rl::UpdateStats> stats;
  bool captured = false;
};

// `updates` updates of the env's actor-critic on cuda:0 over the same seeded random batches.
Updated rl_updates(const std::string& env_name, Algo algo, bool capture, int updates) {
  const JobSettings config = test::rl_config(
      "[env]\nname = \"" + env_name +
      "\"\n[model]\nname = \"actor_critic_mlp\"\n[rl]\nupdate_epochs = 2\nminibatches = 4\n");
  const envs::EnvSpec env = envs::EnvSource(config.env).spec();
  const PolicyHead head = policy_head_for(env);
  const torch::Device cuda(torch::kCUDA, 0);
  Model model = make_rl_model(config.model, config.rl, env);  // seeded: the same weights on every call
  model.to(cuda);
  Optimizer optimizer(model.named_parameters(), {.kind = "adam", .lr = 1e-3, .weight_decay = 0});
  rl::RlUpdater updater(model, head, optimizer, algo, config.rl, at::detail::createCPUGenerator(5));
  if (capture) REQUIRE_FALSE(updater.capture_updates().has_value());

  const std::int64_t T = 16, N = 8, D = env.obs_dim;
  torch::manual_seed(11);
  Updated out;
  for (int u = 0; u < updates; ++u) {
    const auto on_gpu = [&](const torch::Tensor& t) { return t.to(cuda); };
    const torch::Tensor actions = head.is_continuous() ? torch::randn({T, N, env.action_dim})
                                                       : torch::randint(env.num_actions, {T, N}, torch::kInt64);
    rl::Batch b{on_gpu(torch::randn({T + 1, N, D})),
                on_gpu(torch::randn({T, N, D})),
                on_gpu(actions),
                on_gpu(torch::randn({T, N})),
                on_gpu((torch::rand({T, N}) < 0.05).to(torch::kUInt8)),
                on_gpu((torch::rand({T, N}) < 0.05).to(torch::kUInt8)),
                on_gpu(torch::full({T, N}, -1.0f))};
    out.stats.push_back(updater.update(b, 1e-3));
  }
  for (const torch::Tensor& p : model.parameters()) out.params.push_back(p.detach().cpu());
  out.captured = updater.updates_captured();
  return out;
}

}  // namespace

TEST_CASE(
    "a captured RL update ends with the eager update's weights and losses: PPO and V-trace, discrete and "
    "continuous") {
  for (const auto& [env_name, algo] : std::vector<std::pair<std::string, Algo>>{
           {"cartpole", Algo::ppo}, {"pendulum", Algo::ppo}, {"cartpole", Algo::vtrace}, {"pendulum", Algo::vtrace}}) {
    const std::string env = env_name;  // clang 14 cannot capture a structured binding (CAPTURE's lambda)
    const bool vtrace = algo == Algo::vtrace;
    CAPTURE(env);
    CAPTURE(vtrace);
    // Five updates of 8 minibatch steps: three warm-ups, the capture (and its first replay), a replay.
    const Updated eager = rl_updates(env, algo, false, 5);
    const Updated graph = rl_updates(env, algo, true, 5);
    CHECK_FALSE(eager.captured);
    CHECK(graph.captured);
    REQUIRE(eager.params.size() == graph.params.size());
    double moved = 0;
    for (std::size_t i = 0; i < eager.params.size(); ++i) {
      CAPTURE(i);
      CHECK(torch::allclose(eager.params[i], graph.params[i], 1e-4, 1e-5));
      moved = std::max(moved, (graph.params[i] - eager.params[i]).abs().max().item<double>());
    }
    MESSAGE("largest difference between the eager and the captured weights: " << moved);
    for (std::size_t u = 0; u < eager.stats.size(); ++u) {
      CAPTURE(u);
      CHECK(graph.stats[u].minibatches == 8);
      CHECK(graph.stats[u].loss == doctest::Approx(eager.stats[u].loss).epsilon(1e-4));
      CHECK(graph.stats[u].entropy == doctest::Approx(eager.stats[u].entropy).epsilon(1e-4));
      CHECK(graph.stats[u].approx_kl == doctest::Approx(eager.stats[u].approx_kl).epsilon(1e-3));
      CHECK(graph.stats[u].explained_var == doctest::Approx(eager.stats[u].explained_var).epsilon(1e-3));
    }
  }
}

#endif
