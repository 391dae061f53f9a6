// PPO's keys past CleanRL's recipe (docs/RL.md): the update's diagnostics, rl.kl_coef, rl.norm_value,
// rl.kl_target's rule, rl.ppo_targets = "vtrace", and the combinations the settings refuse. On the CPU,
// over batches made here, with the learning rate 0 where a test needs the policy to stay put.
#include "tests/torch_doctest.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/types.h>
#include <torch/utils.h>

#include <cmath>
#include <string>

#include "common/torch/rl_model.hpp"
#include "envs/env_source.hpp"
#include "learner/rl/normalizers.hpp"
#include "learner/rl/update.hpp"
#include "tests/actor_rollout_fixture.hpp"
#include "tests/harness.hpp"

using namespace tandem;

namespace {

constexpr std::int64_t kSteps = 8, kColumns = 4;

struct Setup {
  JobSettings settings;
  envs::EnvSpec env;
  PolicyHead head;
  Model model;
  Optimizer optimizer;
};

Setup setup(const std::string& rl_keys) {
  JobSettings settings = test::rl_config(
      "[env]\nname = \"pendulum\"\n[model]\nname = \"actor_critic_mlp\"\n[rl]\nupdate_epochs = 2\nminibatches = 2\n" +
      rl_keys);
  envs::EnvSpec env = envs::EnvSource(settings.env).spec();
  PolicyHead head = policy_head_for(env);
  Model model = make_rl_model(settings.model, settings.rl, env);
  Optimizer optimizer(model.named_parameters(), {.kind = "adam", .lr = 1e-3, .weight_decay = 0});
  return {std::move(settings), std::move(env), head, std::move(model), std::move(optimizer)};
}

// A seeded batch whose behaviour log-probabilities are the model's own minus `offset`: every sample's
// ratio r is e^offset before the update moves the policy.
rl::Batch batch_for(Setup& s, double offset) {
  torch::manual_seed(3);
  const std::int64_t D = s.env.obs_dim;
  rl::Batch b{torch::randn({kSteps + 1, kColumns, D}),
              torch::randn({kSteps, kColumns, D}),
              torch::randn({kSteps, kColumns, s.env.action_dim}),
              torch::randn({kSteps, kColumns}),
              (torch::rand({kSteps, kColumns}) < 0.1).to(torch::kUInt8),
              (torch::rand({kSteps, kColumns}) < 0.1).to(torch::kUInt8),
              torch::zeros({kSteps, kColumns})};
  torch::NoGradGuard no_grad;
  const torch::Tensor obs = b.observations.narrow(0, 0, kSteps).reshape({-1, D});
  const torch::Tensor params = s.model.forward_heads(obs.reshape(rl_model_input_shape(-1, s.model.spec())))[0];
  b.log_probs =
      (s.head.log_prob(params, b.actions.reshape({-1, s.env.action_dim})) - offset).reshape({kSteps, kColumns});
  return b;
}

rl::UpdateStats update(Setup& s, const rl::Batch& b, double lr, rl::ReturnNormalizer* returns = nullptr) {
  rl::RlUpdater updater(s.model, s.head, s.optimizer, Algo::ppo, s.settings.rl, at::detail::createCPUGenerator(1),
                        returns);
  return updater.update(b, lr);
}

}  // namespace

TEST_CASE("PPO keys: an update that leaves the policy where it is reports KL 0 and nothing clipped") {
  Setup s = setup("");
  const rl::UpdateStats st = update(s, batch_for(s, 0.0), 0.0);
  CHECK(st.minibatches == 4);
  CHECK(st.approx_kl == doctest::Approx(0.0).epsilon(1e-6));
  CHECK(st.clip_frac == 0.0);
  CHECK(st.explained_var <= 1.0);
  CHECK(st.adv_std > 0);
  CHECK(std::isnan(st.return_std));  // rl.norm_value is off
}

TEST_CASE("PPO keys: rl.kl_coef adds kl_coef x ((r - 1) - log r) to the loss, and the samples out of the clip count") {
  const double offset = 0.3;  // r = e^0.3 = 1.35 for every sample: outside 1 +- 0.2
  const double kl = std::exp(offset) - 1.0 - offset;
  Setup plain = setup("");
  Setup penalised = setup("kl_coef = 0.5\n");
  const rl::UpdateStats a = update(plain, batch_for(plain, offset), 0.0);
  const rl::UpdateStats b = update(penalised, batch_for(penalised, offset), 0.0);
  CHECK(a.approx_kl == doctest::Approx(kl).epsilon(1e-5));
  CHECK(b.approx_kl == doctest::Approx(kl).epsilon(1e-5));
  CHECK(a.clip_frac == 1.0);
  CHECK(b.loss - a.loss == doctest::Approx(0.5 * kl).epsilon(1e-4));
  CHECK(b.policy_loss == doctest::Approx(a.policy_loss));
}

TEST_CASE("PPO keys: the return normaliser keeps the targets' running moments and maps back what it maps") {
  rl::ReturnNormalizer norm(torch::kCPU);
  torch::manual_seed(5);
  const torch::Tensor first = torch::randn({64}, torch::kFloat64) * 30 + 100;
  const torch::Tensor second = torch::randn({32}, torch::kFloat64) * 10 + 50;
  norm.update(first);
  norm.update(second);
  const torch::Tensor all = torch::cat({first, second});
  // The starting point (mean 0, var 1, count 1e-4) weighs 1e-4 / 96 of the total: within 1e-5.
  CHECK(norm.stddev().item<double>() ==
        doctest::Approx(std::sqrt(all.var(/*unbiased=*/false).item<double>() + 1e-5)).epsilon(1e-5));
  const torch::Tensor x = torch::tensor({40.0, 90.0, 130.0}, torch::kFloat64);
  CHECK(torch::allclose(norm.denormalize(norm.normalize(x)), x, 1e-9, 1e-9));
  CHECK(norm.normalize(torch::tensor({1e6}, torch::kFloat64)).item<double>() == 5.0);  // clipped to +-5
  CHECK(norm.state().front().first == "return_moments");
}

TEST_CASE("PPO keys: with rl.norm_value the update reports the std its targets were divided by") {
  Setup s = setup("norm_value = true\n");
  rl::ReturnNormalizer norm(torch::kCPU);
  const rl::UpdateStats st = update(s, batch_for(s, 0.0), 1e-3, &norm);
  CHECK(st.return_std == doctest::Approx(norm.stddev().item<double>()));
  CHECK(std::isfinite(st.value_loss));
}

TEST_CASE("PPO keys: rl.kl_target shrinks the learning rate after a large step and grows it after a small one") {
  struct Row {
    double scale, kl, next;
  };
  for (const Row& r : {Row{1.0, 0.05, 1.0 / 1.5}, Row{1.0, 0.001, 1.5}, Row{1.0, 0.01, 1.0}, Row{0.01, 0.5, 0.01},
                       Row{10.0, 0.0, 10.0}, Row{2.0, std::nan(""), 2.0}}) {
    CAPTURE(r.kl);
    CHECK(rl::follow_kl(r.scale, r.kl, 0.01) == doctest::Approx(r.next));
  }
}

TEST_CASE("PPO keys: rl.ppo_targets = \"vtrace\" trains on V-trace's targets") {
  Setup gae = setup("");
  Setup vtrace = setup("ppo_targets = \"vtrace\"\n");
  // On-policy slots: V-trace with rho_bar = c_bar = 1 is GAE with lambda 1, not the recipe's 0.95.
  const rl::UpdateStats a = update(gae, batch_for(gae, 0.0), 0.0);
  const rl::UpdateStats b = update(vtrace, batch_for(vtrace, 0.0), 0.0);
  CHECK(std::isfinite(b.value_loss));
  CHECK(b.value_loss != doctest::Approx(a.value_loss).epsilon(1e-3));
  const torch::Tensor before = vtrace.model.parameters().front().detach().clone();
  update(vtrace, batch_for(vtrace, 0.0), 1e-3);
  CHECK((vtrace.model.parameters().front().detach() - before).abs().max().item<double>() > 0);
}

TEST_CASE("PPO keys: the settings refuse PPO's keys under V-trace and two learning-rate schedules at once") {
  const std::string rl_job =
      "[env]\nname = \"pendulum\"\n[model]\nname = \"actor_critic_mlp\"\n[actor]\nrole = "
      "\"rollout\"\n";
  const std::string vtrace = rl_job + "[learner]\nalgo = \"vtrace\"\n[rl]\nnorm_value = true\n";
  CHECK(test::error_of([&] { test::rl_config(vtrace); }).find("rl.norm_value, rl.kl_coef") != std::string::npos);
  const std::string both = rl_job + "[learner]\nalgo = \"ppo\"\n[rl]\nkl_target = 0.01\n";
  CHECK(test::error_of([&] { test::rl_config(both); }).find("rl.kl_target = 0.01 and rl.anneal_lr = true") !=
        std::string::npos);
}
