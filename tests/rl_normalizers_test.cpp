// The continuous-control recipe's pieces: the observation statistics (their update, the network's use
// of them, a checkpoint and the weight slab carrying them), the Gaussian policy's state-independent
// log-std, and reward scaling against direct computations.
#include "tests/torch_doctest.hpp"
// (keep this order)
#include <torch/optim/adam.h>
#include <torch/utils.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "actor/follower.hpp"
#include "common/torch/flat_params.hpp"
#include "common/torch/rl_model.hpp"
#include "learner/model_publisher.hpp"
#include "learner/rl/normalizers.hpp"
#include "learner/rl/rl_checkpoint.hpp"
#include "shm/experience_ring.hpp"
#include "tests/harness.hpp"

using namespace tandem;

namespace {

EnvSpec env_of(int obs_dim, int action_dim) {
  EnvSpec e;
  e.name = "test";
  e.obs_dim = obs_dim;
  e.action_dim = action_dim;  // num_actions stays 0: continuous
  return e;
}

Model rl_model(const EnvSpec& env, bool norm_obs) {
  const ModelSettings model{.name = "actor_critic_mlp", .seed = 3};
  return make_rl_model(model, RlSettings{.norm_obs = norm_obs}, env);
}

}  // namespace

TEST_CASE("rl normalizers: observations folded in batch by batch give the mean and variance of all of them") {
  Model model = rl_model(env_of(3, 2), true);
  const std::optional<ObsStats> stats = obs_stats_of(model);
  REQUIRE(stats);
  CHECK(torch::equal(stats->mean, torch::zeros({3})));
  CHECK(torch::equal(stats->var, torch::ones({3})));
  torch::manual_seed(1);
  // Batches of different sizes, scales and offsets, as updates of a policy that moves.
  std::vector<torch::Tensor> batches = {torch::randn({64, 5, 3}) * 4 + 7, torch::randn({128, 3}) * 0.5 - 2,
                                        torch::randn({10, 3}) * 30};
  for (const torch::Tensor& b : batches) rl::update_obs_stats(*stats, b);
  const torch::Tensor all = torch::cat({batches[0].reshape({-1, 3}), batches[1], batches[2]}).to(torch::kFloat64);
  const double n = static_cast<double>(all.size(0));
  CHECK(stats->count.item<double>() == doctest::Approx(n + rl::kStartCount));
  // gymnasium's starting count of 1e-4 weighs in at 1e-4 / n: well inside the tolerance.
  CHECK(torch::allclose(stats->mean.to(torch::kFloat64), all.mean(0), 1e-5, 1e-5));
  CHECK(torch::allclose(stats->var.to(torch::kFloat64), all.var(0, /*unbiased=*/false), 1e-5, 1e-5));
}

TEST_CASE("rl normalizers: the network normalises observations by its statistics and clips them to +-10") {
  Model plain = rl_model(env_of(3, 1), false), normed = rl_model(env_of(3, 1), true);
  const ObsStats stats = *obs_stats_of(normed);
  torch::NoGradGuard no_grad;
  stats.mean.copy_(torch::tensor({1.0f, -2.0f, 0.5f}));
  stats.var.copy_(torch::tensor({4.0f, 0.25f, 1e-6f}));
  const torch::Tensor x = torch::tensor({{3.0f, -2.0f, 0.5f}, {1.0f, 0.0f, 100.0f}});
  const torch::Tensor by_hand = ((x - stats.mean) / (stats.var + 1e-8).sqrt()).clamp(-10, 10);
  const auto want = plain.forward_heads(by_hand.view({2, 1, 1, 3}));  // same seed: the same weights
  const auto got = normed.forward_heads(x.view({2, 1, 1, 3}));
  CHECK(torch::allclose(got[0], want[0]));
  CHECK(torch::allclose(got[1], want[1]));
}

TEST_CASE("rl normalizers: the Gaussian log-std is a parameter the optimizer moves, its log-prob the closed form") {
  const EnvSpec env = env_of(4, 2);
  Model model = rl_model(env, false);
  const PolicyHead head = policy_head_for(env);
  torch::Tensor log_std;
  for (auto& [name, p] : model.named_parameters())
    if (name == "log_std") log_std = p;
  REQUIRE(log_std.defined());
  CHECK(log_std.sizes() == torch::IntArrayRef{2});
  CHECK(torch::equal(log_std, torch::zeros({2})));
  {
    torch::NoGradGuard no_grad;
    log_std.copy_(torch::tensor({0.3f, -0.7f}));
  }
  torch::manual_seed(2);
  const torch::Tensor obs = torch::randn({5, 1, 1, 4});
  const torch::Tensor params = model.forward_heads(obs)[0];
  REQUIRE(params.sizes() == torch::IntArrayRef{5, 4});
  // The same log-std for every state.
  CHECK(torch::equal(params.narrow(1, 2, 2), log_std.detach().expand({5, 2})));
  const torch::Tensor mean = params.narrow(1, 0, 2).detach();
  const torch::Tensor actions = torch::randn({5, 2});
  const torch::Tensor sd = log_std.detach().exp();
  const torch::Tensor closed = (-0.5 * ((actions - mean) / sd).pow(2) - sd.log() - 0.5 * std::log(2 * M_PI)).sum(-1);
  CHECK(torch::allclose(head.log_prob(params, actions), closed, 1e-5, 1e-5));

  torch::optim::Adam adam(model.parameters(), torch::optim::AdamOptions(1e-2));
  const torch::Tensor before = log_std.detach().clone();
  (-head.log_prob(model.forward_heads(obs)[0], actions).mean()).backward();
  REQUIRE(log_std.grad().defined());
  adam.step();
  CHECK((log_std.detach() - before).abs().min().item<double>() > 1e-3);
}

TEST_CASE("rl normalizers: reward scaling matches a direct computation over a trajectory with episode ends") {
  constexpr std::int64_t T = 6, E = 2;
  constexpr double gamma = 0.9;
  const std::vector<float> rewards = {1, -2, 0.5f, 3, 2, 0, -1, 4, 1, 1, 500, 0.25f};
  std::vector<std::uint8_t> term(T * E, 0), trunc(T * E, 0);
  term[2 * E + 0] = 1;   // env 0's episode ends at step 2
  trunc[3 * E + 1] = 1;  // env 1's is cut short at step 3
  // Directly: the mean and population variance of every return so far, with gymnasium's prior (count
  // 1e-4 of mean 0, variance 1), and each reward over sqrt(var + 1e-8), clipped to +-10.
  std::vector<float> want(T * E);
  std::vector<double> seen;
  double g[E] = {0, 0};
  for (std::int64_t t = 0; t < T; ++t) {
    for (std::int64_t e = 0; e < E; ++e) seen.push_back(g[e] = gamma * g[e] + rewards[t * E + e]);
    const double total = rl::kStartCount + static_cast<double>(seen.size());
    double sum = 0;
    for (double x : seen) sum += x;
    const double mean = sum / total;
    double m2 = rl::kStartCount * (1.0 + mean * mean);
    for (double x : seen) m2 += (x - mean) * (x - mean);
    const double var = m2 / total;
    for (std::int64_t e = 0; e < E; ++e) {
      want[t * E + e] = static_cast<float>(std::clamp(rewards[t * E + e] / std::sqrt(var + 1e-8), -10.0, 10.0));
      if (term[t * E + e] || trunc[t * E + e]) g[e] = 0;
    }
  }
  // All at once, and in two slots as the learner sees an actor's ring: the returns carry over.
  for (const std::int64_t first : {T, std::int64_t{4}}) {
    CAPTURE(first);
    rl::RewardScaler scaler(2, E, gamma);
    std::vector<float> got(T * E);
    scaler.scale(1, first, rewards.data(), term.data(), trunc.data(), got.data());
    if (first < T)
      scaler.scale(1, T - first, rewards.data() + first * E, term.data() + first * E, trunc.data() + first * E,
                   got.data() + first * E);
    for (std::int64_t i = 0; i < T * E; ++i) CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-5));
    // Each (actor, env) has its own return: actor 0's are untouched, actor 1's are the ones above.
    const torch::Tensor returns = scaler.state()[0].second;
    CHECK(torch::equal(returns[0], torch::zeros({E}, torch::kFloat64)));
    CHECK(returns[1][0].item<double>() == doctest::Approx(g[0]));
    CHECK(returns[1][1].item<double>() == doctest::Approx(g[1]));
  }
}

TEST_CASE("rl normalizers: the first slot of a restarted actor restarts that actor's returns, and only them") {
  const std::string job = test::unique_name("rscale");
  shm::ExperienceShape shape;
  shape.num_actors = 2;
  shape.slots_per_ring = 2;
  shape.steps = 3;
  shape.envs = 2;
  shape.obs_dim = 1;
  shape.action_dim = 1;
  shm::ExperienceRings rings = shm::ExperienceRings::create(job, shape);
  rl::RewardScaler scaler(2, shape.envs, 0.9);
  // One slot of rewards 1 from each actor's first writer, then a second slot from actor 1's same
  // writer (its returns carry on), and one from a restarted actor 0 (its returns restart).
  const auto commit = [&](shm::ExperienceWriter& w) {
    auto slot = w.begin_write();
    REQUIRE(slot);
    std::fill_n(slot->rewards(), shape.steps * shape.envs, 1.0f);
    std::fill_n(slot->terminated(), shape.steps * shape.envs, std::uint8_t{0});
    std::fill_n(slot->truncated(), shape.steps * shape.envs, std::uint8_t{0});
    w.commit(*slot);
  };
  const auto consume = [&](std::uint32_t actor) {
    auto view = rings.peek(actor);
    REQUIRE(view);
    scaler.scale({rl::HeldSlot{actor, *view}}, shape.steps);
    rings.release(actor);
  };
  auto actor0 = shm::ExperienceWriter::attach(job, 0);
  auto actor1 = shm::ExperienceWriter::attach(job, 1);
  commit(actor0);
  commit(actor1);
  commit(actor1);
  consume(0);
  consume(1);
  consume(1);
  const double three_steps = 1 + 0.9 + 0.81, six_steps = three_steps * (1 + 0.729);
  const torch::Tensor returns = scaler.state()[0].second;
  CHECK(returns[0][0].item<double>() == doctest::Approx(three_steps));
  CHECK(returns[1][1].item<double>() == doctest::Approx(six_steps));
  auto restarted0 = shm::ExperienceWriter::attach(job, 0);
  commit(restarted0);
  consume(0);
  CHECK(returns[0][0].item<double>() == doctest::Approx(three_steps));  // restarted, not 0.729 * 2.71 + 2.71
  CHECK(returns[1][1].item<double>() == doctest::Approx(six_steps));
}

TEST_CASE("rl normalizers: a scaled reward far outside the returns seen so far is clipped to 10") {
  constexpr std::int64_t T = 301;
  std::vector<float> rewards(T, 0.01f), out(T);
  rewards.back() = 1000.0f;  // its z is about sqrt(T): past the clip
  const std::vector<std::uint8_t> ends(T, 1), none(T, 0);
  rl::RewardScaler scaler(1, 1, 0.99);
  scaler.scale(0, T, rewards.data(), ends.data(), none.data(), out.data());
  CHECK(out.back() == 10.0f);
  CHECK(out.front() > 0.0f);
}

TEST_CASE("rl normalizers: the statistics and the reward scaler's state survive a checkpoint round trip") {
  test::TempDir dir;
  const EnvSpec env = env_of(3, 1);
  Model model = rl_model(env, true);
  rl::update_obs_stats(*obs_stats_of(model), torch::randn({50, 3}) * 3 + 1);
  rl::RewardScaler scaler(1, 2, 0.99);
  const std::vector<float> r = {1, 2, 3, 4};
  const std::vector<std::uint8_t> none(4, 0);
  std::vector<float> out(4);
  scaler.scale(0, 2, r.data(), none.data(), none.data(), out.data());
  Optimizer optimizer(model.named_parameters(), {.kind = "adam", .lr = 1e-3, .weight_decay = 0});
  const std::string path = (dir.path() / "ckpt-1.safetensors").string();
  rl::save_checkpoint(path, model, optimizer, 1, {}, scaler.state());

  Model restored = rl_model(env, true);
  rl::RewardScaler restored_scaler(1, 2, 0.99);
  Optimizer restored_optimizer(restored.named_parameters(), {.kind = "adam", .lr = 1e-3, .weight_decay = 0});
  rl::load_checkpoint(path, restored, restored_optimizer, restored_scaler.state());
  const ObsStats a = *obs_stats_of(model), b = *obs_stats_of(restored);
  CHECK(torch::equal(a.mean, b.mean));
  CHECK(torch::equal(a.var, b.var));
  CHECK(torch::equal(a.count, b.count));
  CHECK(restored_scaler.variance() == scaler.variance());
  for (std::size_t i = 0; i < 2; ++i) CHECK(torch::equal(restored_scaler.state()[i].second, scaler.state()[i].second));

  // A file written without rl.norm_obs cannot resume a run with it: one line naming the setting.
  Model plain = rl_model(env, false);
  Optimizer plain_optimizer(plain.named_parameters(), {.kind = "adam", .lr = 1e-3, .weight_decay = 0});
  const std::string plain_path = (dir.path() / "ckpt-2.safetensors").string();
  rl::save_checkpoint(plain_path, plain, plain_optimizer, 2, {});
  const std::string error = test::error_of([&] { rl::load_checkpoint(plain_path, restored, restored_optimizer); });
  CHECK(error.find("rl.norm_obs") != std::string::npos);
}

TEST_CASE("rl normalizers: a follower of the weight slab normalises with the statistics the learner published") {
  const EnvSpec env = env_of(3, 1);
  Model learner_model = rl_model(env, true), actor_model = rl_model(env, true);
  FlatParams lp = FlatParams::flatten(learner_model), ap = FlatParams::flatten(actor_model);
  const std::string name = test::unique_name("tandem.test-obs-stats");
  learner::ModelPublisherOptions options;
  options.model = "actor_critic_mlp";
  learner::ModelPublisher pub(name, lp, options);
  actor::Follower follower(name, ap, {.mode = actor::LoadMode::copy, .model = "actor_critic_mlp"});
  const ObsStats learner_stats = *obs_stats_of(learner_model), actor_stats = *obs_stats_of(actor_model);

  for (int version = 1; version <= 2; ++version) {
    pub.publisher().wait_before_update();
    rl::update_obs_stats(learner_stats, torch::randn({40, 3}) * version + 5.0 * version);
    REQUIRE(pub.publish(static_cast<std::uint64_t>(version)).outcome == learner::Publisher::Outcome::committed);
    REQUIRE(follower.update());
    CHECK(torch::equal(actor_stats.mean, learner_stats.mean));
    CHECK(torch::equal(actor_stats.var, learner_stats.var));
    CHECK(torch::equal(actor_stats.count, learner_stats.count));
    torch::NoGradGuard no_grad;
    const torch::Tensor x = torch::randn({4, 1, 1, 3}) + 5.0;
    CHECK(torch::equal(actor_model.forward_heads(x)[0], learner_model.forward_heads(x)[0]));
  }
}
