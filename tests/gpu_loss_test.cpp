// GPU: the training loss and accuracy in one pass (common/torch/cross_entropy.hpp) against ATen's
// cross-entropy, argmax, eq and sum. Without a GPU this binary prints SKIP and exits 77.
#include <torch/torch.h>
// After LibTorch: Debian's c10 pulls in glog, whose CHECK must not replace doctest's.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>

#include "common/torch/cross_entropy.hpp"
#include "tests/harness.hpp"
#include "tests/tensor_compare.hpp"

TANDEM_GPU_TEST_BINARY();

using namespace tandem;
using testing::kGpu;
using testing::relative_l2;

TEST_CASE("cross_entropy_and_correct gives ATen's loss, gradient and correct count, the same bits every run") {
  REQUIRE(torch::cuda::is_available());
  torch::manual_seed(13);
  struct Case {
    std::int64_t n, classes;
  };
  // The last: more logits than one block takes, ATen's kernels.
  for (const Case c : {Case{128, 10}, Case{512, 10}, Case{7, 1000}, Case{3, 1}, Case{1500, 3}, Case{300, 1000}}) {
    CAPTURE(c.n);
    CAPTURE(c.classes);
    torch::Tensor logits0 = torch::randn({c.n, c.classes}, kGpu) * 3;
    logits0.index_put_({0}, 1.5);  // a row of ties: the first maximum is the prediction
    const torch::Tensor y = torch::randint(c.classes, {c.n}, torch::TensorOptions().dtype(torch::kInt64).device(kGpu));

    const torch::Tensor logits = logits0.clone().requires_grad_(), ref = logits0.clone().requires_grad_();
    const auto [loss, correct] = cross_entropy_and_correct(logits, y);
    const torch::Tensor ref_loss = torch::nn::functional::cross_entropy(ref, y);
    CHECK((loss.scalar_type() == torch::kFloat32));
    CHECK((correct.scalar_type() == torch::kInt64));
    CHECK_FALSE(correct.requires_grad());
    CHECK(std::abs(loss.item<double>() - ref_loss.item<double>()) <= 1e-6 * std::abs(ref_loss.item<double>()));
    CHECK(correct.item<std::int64_t>() == ref.detach().argmax(1).eq(y).sum().item<std::int64_t>());
    (loss * 2.5).backward();
    (ref_loss * 2.5).backward();
    if (c.classes == 1) {
      CHECK(torch::equal(logits.grad(), ref.grad()));  // one class: both gradients are exactly zero
    } else {
      CHECK(relative_l2(logits.grad(), ref.grad()) < 1e-6);
    }

    const auto [again, again_correct] = cross_entropy_and_correct(logits0, y);
    CHECK(torch::equal(again, loss.detach()));
    CHECK(torch::equal(again_correct, correct));
  }
}

TEST_CASE("cross_entropy_and_correct's loss is NaN for a label outside the classes") {
  REQUIRE(torch::cuda::is_available());
  const torch::Tensor logits = torch::randn({4, 10}, kGpu);
  const torch::Tensor y = torch::tensor({1, 2, 10, 3}, torch::TensorOptions().dtype(torch::kInt64).device(kGpu));
  const auto [loss, correct] = cross_entropy_and_correct(logits, y);
  CHECK(std::isnan(loss.item<float>()));
  CHECK(correct.item<std::int64_t>() <= 3);
}
