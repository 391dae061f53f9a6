// The policy distribution: sampling follows the parameters, log-probabilities and entropies match the
// closed forms, a seeded generator repeats itself, and gradients flow to the parameters.
#include <ATen/CPUGeneratorImpl.h>
#include <torch/types.h>
// (keep this order)
#include <doctest/doctest.h>

#include <cmath>

#include "common/torch/policy.hpp"

using namespace tandem;

TEST_CASE("discrete sampling follows the softmax of the logits") {
  const PolicyHead head = PolicyHead::discrete(3);
  const torch::Tensor logits = torch::tensor({0.0f, std::log(3.0f), std::log(6.0f)}).repeat({20000, 1});
  at::Generator gen = at::detail::createCPUGenerator(7);
  const ActionSample s = head.sample(logits, gen);
  const torch::Tensor counts = torch::bincount(s.actions, {}, 3).to(torch::kDouble) / 20000.0;
  CHECK(counts[0].item<double>() == doctest::Approx(0.1).epsilon(0.1));
  CHECK(counts[1].item<double>() == doctest::Approx(0.3).epsilon(0.05));
  CHECK(counts[2].item<double>() == doctest::Approx(0.6).epsilon(0.05));
  CHECK(torch::allclose(s.log_probs, head.log_prob(logits, s.actions)));
  CHECK(head.greedy(logits)[0].item<std::int64_t>() == 2);
}

TEST_CASE("the categorical entropy and log-probability are the closed forms") {
  const PolicyHead head = PolicyHead::discrete(2);
  const torch::Tensor logits = torch::tensor({{0.0f, 0.0f}, {0.0f, 100.0f}});
  const torch::Tensor h = head.entropy(logits);
  CHECK(h[0].item<double>() == doctest::Approx(std::log(2.0)));
  CHECK(h[1].item<double>() == doctest::Approx(0.0).epsilon(1e-6));
  CHECK(head.log_prob(logits, torch::tensor({1, 1}, torch::kLong))[0].item<double>() == doctest::Approx(std::log(0.5)));
}

TEST_CASE("the Gaussian log-probability and entropy are the closed forms, with log_std clamped") {
  const PolicyHead head = PolicyHead::continuous(1);
  REQUIRE(head.params_dim() == 2);
  const torch::Tensor params = torch::tensor({{1.0f, std::log(2.0f)}, {0.0f, -50.0f}});
  const torch::Tensor a = torch::tensor({{2.0f}, {0.0f}});
  const double expected = -0.5 * 0.25 - std::log(2.0) - 0.5 * std::log(2 * M_PI);
  CHECK(head.log_prob(params, a)[0].item<double>() == doctest::Approx(expected));
  CHECK(std::isfinite(head.log_prob(params, a)[1].item<double>()));  // log_std -50 reads as kMinLogStd
  CHECK(head.entropy(params)[0].item<double>() == doctest::Approx(0.5 + 0.5 * std::log(2 * M_PI) + std::log(2.0)));
  CHECK(head.greedy(params)[0][0].item<double>() == 1.0);
}

TEST_CASE("Gaussian samples have the mean and spread of the parameters") {
  const PolicyHead head = PolicyHead::continuous(2);
  const torch::Tensor params = torch::tensor({-1.0f, 3.0f, std::log(0.5f), 0.0f}).repeat({40000, 1});
  const ActionSample s = head.sample(params, at::detail::createCPUGenerator(3));
  CHECK(s.actions.sizes() == torch::IntArrayRef({40000, 2}));
  CHECK(s.actions.mean(0)[0].item<double>() == doctest::Approx(-1.0).epsilon(0.02));
  CHECK(s.actions.mean(0)[1].item<double>() == doctest::Approx(3.0).epsilon(0.02));
  CHECK(s.actions.std(0)[0].item<double>() == doctest::Approx(0.5).epsilon(0.03));
  CHECK(s.actions.std(0)[1].item<double>() == doctest::Approx(1.0).epsilon(0.03));
}

TEST_CASE("a generator with the same seed draws the same actions") {
  const PolicyHead head = PolicyHead::discrete(4);
  const torch::Tensor logits = torch::zeros({64, 4});
  const auto a = head.sample(logits, at::detail::createCPUGenerator(11)).actions;
  const auto b = head.sample(logits, at::detail::createCPUGenerator(11)).actions;
  const auto c = head.sample(logits, at::detail::createCPUGenerator(12)).actions;
  CHECK(torch::equal(a, b));
  CHECK_FALSE(torch::equal(a, c));
}

TEST_CASE("log-probabilities and entropies carry gradients to the parameters") {
  for (const PolicyHead head : {PolicyHead::discrete(3), PolicyHead::continuous(3)}) {
    const torch::Tensor params = torch::randn({5, head.params_dim()}, torch::requires_grad());
    const torch::Tensor actions = head.sample(params.detach()).actions;
    (head.log_prob(params, actions).sum() + head.entropy(params).sum()).backward();
    REQUIRE(params.grad().defined());
    CHECK(params.grad().abs().sum().item<double>() > 0);
  }
}
