// GPU: the fused layers against ATen's ops — BatchNorm + add + ReLU (common/torch/builtin_nets/bn_act.hpp), the
// one-launch weight conversion (weight_prep.hpp), the folded evaluation (folded_eval.hpp) and its fused
// conv-ReLU-pool and pool-linear kernels (conv_pool.hpp), and the fused optimizers (learner/optim.hpp); the
// convolutions' own paths are in gpu_conv_test.cpp. Without a GPU this binary prints SKIP and exits 77.
#include <torch/torch.h>
// After LibTorch: Debian's c10 pulls in glog, whose CHECK must not replace doctest's.
#include <doctest/doctest.h>

#include <limits>
#include <optional>
#include <stdexcept>
#include <vector>

#include "common/torch/builtin_nets/bn_act.hpp"
#include "common/torch/builtin_nets/bn_act_cudnn.hpp"
#include "common/torch/builtin_nets/conv_pool.hpp"
#include "common/torch/builtin_nets/folded_eval.hpp"
#include "common/torch/models.hpp"
#include "common/torch/builtin_nets/weight_prep.hpp"
#include "learner/optim.hpp"
#include "tests/harness.hpp"
#include "tests/tensor_compare.hpp"

TANDEM_GPU_TEST_BINARY();

using namespace tandem;
using testing::channels_last;
using testing::kGpu;
using testing::relative_l2;

namespace {

// A BatchNorm with non-trivial affine parameters and running statistics, on the GPU.
torch::nn::BatchNorm2d random_bn(std::int64_t channels) {
  torch::nn::BatchNorm2d bn(channels);
  bn->to(kGpu);
  torch::NoGradGuard no_grad;
  bn->weight.uniform_(0.5, 1.5);
  bn->bias.uniform_(-0.5, 0.5);
  bn->running_mean.uniform_(-1, 1);
  bn->running_var.uniform_(0.5, 2);
  return bn;
}

torch::nn::BatchNorm2d copy_of(const torch::nn::BatchNorm2d& bn) {
  torch::nn::BatchNorm2d c(bn->options);
  c->to(kGpu);
  torch::NoGradGuard no_grad;
  for (auto [to, from] : {std::pair{c->weight, bn->weight},
                          {c->bias, bn->bias},
                          {c->running_mean, bn->running_mean},
                          {c->running_var, bn->running_var}})
    to.copy_(from);
  return c;
}

}  // namespace

TEST_CASE("bn_act: the fused forward and backward match ATen's BatchNorm, add and ReLU" * doctest::timeout(120)) {
  REQUIRE(torch::cuda::is_available());
  bn_act_set_backend(BnBackend::tandem);  // Tandem's kernels at every width (automatic picks cuDNN's from 64)
  struct Shape {
    std::int64_t n, c, h, w;
  };
  for (const torch::ScalarType dtype : {torch::kFloat32, torch::kBFloat16})
    for (const Shape s : {Shape{8, 64, 16, 16}, Shape{4, 16, 32, 32}, Shape{32, 512, 4, 4}, Shape{3, 24, 5, 7}})
      for (const bool residual : {false, true})
        for (const bool relu : {true, false}) {
          const std::string type = c10::toString(dtype);
          CAPTURE(type);
          CAPTURE(s.c);
          CAPTURE(residual);
          CAPTURE(relu);
          torch::manual_seed(s.c + residual);
          torch::nn::BatchNorm2d ref = random_bn(s.c), fused = copy_of(ref);
          // An offset mean: the statistics' shifted sums must not lose the variance to cancellation.
          const torch::Tensor x0 = channels_last((torch::randn({s.n, s.c, s.h, s.w}, kGpu) * 2 + 3).to(dtype));
          const torch::Tensor r0 = channels_last(torch::randn({s.n, s.c, s.h, s.w}, kGpu).to(dtype));
          const torch::Tensor dy = channels_last(torch::randn({s.n, s.c, s.h, s.w}, kGpu).to(dtype));
          torch::Tensor x1 = x0.clone().requires_grad_(), r1 = r0.clone().requires_grad_();
          torch::Tensor x2 = x0.clone().requires_grad_(), r2 = r0.clone().requires_grad_();
          REQUIRE(bn_act_is_fused(*fused, x2, residual ? r2 : torch::Tensor()));

          torch::Tensor want = ref->forward(x1);
          if (residual) want = want + r1;
          if (relu) want = torch::relu(want);
          const torch::Tensor got = bn_act(*fused, x2, residual ? r2 : torch::Tensor(), relu);
          const double tol = dtype == torch::kFloat32 ? 1e-5 : 1e-2;
          CHECK((got.scalar_type() == dtype));
          CHECK(got.is_contiguous(at::MemoryFormat::ChannelsLast));
          CHECK(relative_l2(got, want) < tol);
          CHECK(relative_l2(fused->running_mean, ref->running_mean) < 1e-5);
          CHECK(relative_l2(fused->running_var, ref->running_var) < 1e-5);
          CHECK(fused->num_batches_tracked.item<std::int64_t>() == ref->num_batches_tracked.item<std::int64_t>());

          want.backward(dy);
          got.backward(dy);
          if (dtype == torch::kFloat32) {
            CHECK(relative_l2(x2.grad(), x1.grad()) < 1e-4);
            CHECK(relative_l2(fused->weight.grad(), ref->weight.grad()) < 1e-4);
            CHECK(relative_l2(fused->bias.grad(), ref->bias.grad()) < 1e-4);
            if (residual) CHECK(relative_l2(r2.grad(), r1.grad()) < 1e-4);
          } else {
            // bf16: ATen rounds BatchNorm's output before the add and the ReLU, so where the sum is
            // near zero its ReLU mask differs from one computed in float32; against float64, the
            // fused gradients must be at least as close as ATen's.
            torch::nn::BatchNorm2d exact = copy_of(ref);
            exact->to(torch::kDouble);
            torch::Tensor x3 = x0.to(torch::kDouble).requires_grad_(), r3 = r0.to(torch::kDouble).requires_grad_();
            torch::Tensor want64 = exact->forward(x3);
            if (residual) want64 = want64 + r3;
            if (relu) want64 = torch::relu(want64);
            want64.backward(dy.to(torch::kDouble));
            auto no_worse = [](const torch::Tensor& ours, const torch::Tensor& aten, const torch::Tensor& truth) {
              const double mine = relative_l2(ours, truth), theirs = relative_l2(aten, truth);
              INFO("fused ", mine, " ATen ", theirs);
              CHECK(mine <= std::max(1.5 * theirs, 1e-2));
            };
            no_worse(x2.grad(), x1.grad(), x3.grad());
            no_worse(fused->weight.grad(), ref->weight.grad(), exact->weight.grad());
            no_worse(fused->bias.grad(), ref->bias.grad(), exact->bias.grad());
            if (residual) no_worse(r2.grad(), r1.grad(), r3.grad());
          }
        }
  bn_act_set_backend(BnBackend::automatic);
}

TEST_CASE("bn_act: NaN passes through ReLU and its gradient, as in ATen") {
  REQUIRE(torch::cuda::is_available());
  torch::nn::BatchNorm2d ref = random_bn(8), fused = copy_of(ref);
  torch::Tensor x = channels_last(torch::randn({4, 8, 4, 4}, kGpu));
  torch::Tensor r = channels_last(torch::zeros({4, 8, 4, 4}, kGpu));
  r.index_put_({0, 3, 1, 1}, std::numeric_limits<float>::quiet_NaN());  // in the residual: statistics stay finite
  const torch::Tensor want = torch::relu(ref->forward(x) + r), got = bn_act(*fused, x, r);
  CHECK(torch::equal(torch::isnan(got), torch::isnan(want)));
  CHECK(torch::isnan(got).sum().item<std::int64_t>() == 1);
}

TEST_CASE("channels_last_weights converts every weight at once and hands float32 gradients back") {
  REQUIRE(torch::cuda::is_available());
  torch::manual_seed(1);
  // The last one's channels (2048 x 3 x 3) are wider than the kernel stages in shared memory.
  std::vector<torch::Tensor> params = {torch::randn({64, 3, 3, 3}, kGpu), torch::randn({128, 64, 3, 3}, kGpu),
                                       torch::randn({128, 64, 1, 1}, kGpu), torch::randn({4, 2048, 3, 3}, kGpu)};
  for (torch::Tensor& p : params) p.requires_grad_();
  for (const torch::ScalarType dtype : {torch::kFloat32, torch::kBFloat16}) {
    const std::string type = c10::toString(dtype);
    CAPTURE(type);
    const std::vector<torch::Tensor> w = channels_last_weights(params, dtype);
    REQUIRE(w.size() == params.size());
    torch::Tensor loss = torch::zeros({}, kGpu);
    std::vector<torch::Tensor> g;
    for (std::size_t i = 0; i < w.size(); ++i) {
      CHECK((w[i].scalar_type() == dtype));
      CHECK(w[i].is_contiguous(at::MemoryFormat::ChannelsLast));
      CHECK(torch::equal(w[i], params[i].detach().to(dtype)));  // a copy (and a cast): exact
      g.push_back(channels_last(torch::randn(w[i].sizes(), kGpu).to(dtype)));
      loss = loss + (w[i].to(torch::kFloat32) * g.back().to(torch::kFloat32)).sum();
    }
    for (torch::Tensor& p : params) p.mutable_grad() = torch::Tensor();
    loss.backward();
    for (std::size_t i = 0; i < params.size(); ++i) {
      CHECK(params[i].grad().is_contiguous());
      CHECK(torch::equal(params[i].grad(), g[i].to(torch::kFloat32).contiguous()));
    }
  }
}

TEST_CASE("folded evaluation gives eager's logits, and refold() follows new weights" * doctest::timeout(120)) {
  REQUIRE(torch::cuda::is_available());
  for (const std::string name : {"cnn", "resnet18"}) {
    CAPTURE(name);
    Model m = Model::create({.name = name, .channels = 3, .height = 32, .width = 32, .num_classes = 10, .seed = 3});
    m.to(kGpu);
    {  // statistics and affine parameters far from their initial 0/1, so folding has work to do
      torch::NoGradGuard no_grad;
      for (auto& [n, b] : m.named_buffers())
        if (n.ends_with("running_var")) b.uniform_(0.5, 2);
        else if (n.ends_with("running_mean")) b.uniform_(-0.5, 0.5);
      for (auto& [n, p] : m.named_parameters())
        if (n.find("bn") != std::string::npos || n.find("downsample.1") != std::string::npos) p.uniform_(0.5, 1.5);
    }
    m.eval();
    REQUIRE_FALSE(FoldedEval::unsupported(m.builtin_network(), m.device()).has_value());
    const torch::Tensor x = torch::randn({64, 3, 32, 32}, kGpu);
    torch::NoGradGuard no_grad;
    const torch::Tensor eager = m.forward(x);
    FoldedEval f32(*m.builtin_network(), torch::kFloat32), bf16(*m.builtin_network(), torch::kBFloat16);
    f32.refold();
    bf16.refold();
    CHECK((f32.forward(x).scalar_type() == torch::kFloat32));
    CHECK(relative_l2(f32.forward(x), eager) < 1e-3);
    CHECK(relative_l2(bf16.forward(x), eager) < 2e-2);
    for (auto& [n, p] : m.named_parameters()) p.mul_(0.9);  // a new version, copied in place
    for (auto& [n, b] : m.named_buffers())
      if (n.ends_with("running_mean")) b.add_(0.1);
    const torch::Tensor eager2 = m.forward(x);
    CHECK(relative_l2(f32.forward(x), eager2) > 1e-2);  // stale until refolded
    f32.refold();
    CHECK(relative_l2(f32.forward(x), eager2) < 1e-3);
  }
}

TEST_CASE("the fused optimizers update as the eager ones do" * doctest::timeout(60)) {
  REQUIRE(torch::cuda::is_available());
  REQUIRE(Optimizer::fused_available());
  for (const std::string kind : {"sgd", "adam", "adamw"}) {
    CAPTURE(kind);
    torch::manual_seed(7);
    const torch::Tensor flat = torch::randn({1000}, kGpu);
    auto params = [](const torch::Tensor& buffer) {
      return std::vector<std::pair<std::string, torch::Tensor>>{
          {"a", buffer.narrow(0, 0, 600).view({20, 30}).requires_grad_()},
          {"b", buffer.narrow(0, 600, 400).requires_grad_()}};
    };
    torch::Tensor eager_flat = flat.clone(), fused_flat = flat.clone();
    const OptimizerConfig config{.kind = kind, .lr = 0.01, .momentum = 0.9, .nesterov = true, .weight_decay = 0.01};
    Optimizer eager(params(eager_flat), config), fused(params(fused_flat), config);
    REQUIRE(fused.fused());
    for (int step = 0; step < 20; ++step) {
      const double lr = 0.01 * (1.0 + step % 3);
      std::vector<torch::Tensor> grads;
      for (const torch::Tensor& p : eager.parameters()) {
        grads.push_back(torch::randn(p.sizes(), kGpu));
        p.mutable_grad() = grads.back().clone();
      }
      eager.step(lr);
      fused.set_step_coefficients(lr);
      fused.step_fused(grads);
    }
    CHECK(fused.steps_taken() == 20);
    CHECK(relative_l2(fused_flat, eager_flat) < 1e-5);
    CHECK(relative_l2(fused_flat, flat) > 1e-3);  // it moved
  }
}

TEST_CASE("bn_act's cuDNN backend matches ATen where cuDNN takes the shape" * doctest::timeout(60)) {
  REQUIRE(torch::cuda::is_available());
  bn_act_set_backend(BnBackend::cudnn);
  int taken = 0;
  for (const torch::ScalarType dtype : {torch::kFloat32, torch::kBFloat16})
    for (const bool residual : {false, true}) {
      const std::string type = c10::toString(dtype);
      CAPTURE(type);
      CAPTURE(residual);
      torch::manual_seed(3);
      torch::nn::BatchNorm2d ref = random_bn(64), fused = copy_of(ref);
      const torch::Tensor x = channels_last((torch::randn({16, 64, 8, 8}, kGpu) * 2 + 3).to(dtype));
      const torch::Tensor r = channels_last(torch::randn({16, 64, 8, 8}, kGpu).to(dtype));
      torch::Tensor want = ref->forward(x);
      if (residual) want = want + r;
      want = torch::relu(want);
      const torch::Tensor got = bn_act(*fused, x, residual ? r : torch::Tensor());
      CHECK(relative_l2(got, want) < (dtype == torch::kFloat32 ? 1e-5 : 1e-2));
      CHECK(relative_l2(fused->running_var, ref->running_var) < 1e-5);
      CHECK(fused->num_batches_tracked.item<std::int64_t>() == 1);
      ++taken;
    }
  bn_act_set_backend(BnBackend::automatic);
  CHECK(taken == 4);
}

TEST_CASE("BatchCounts counts the cuDNN BatchNorms of its scope in one launch, and only at apply()") {
  REQUIRE(torch::cuda::is_available());
  bn_act_set_backend(BnBackend::cudnn);
  torch::nn::BatchNorm2d bn = random_bn(64);
  const torch::Tensor x = channels_last(torch::randn({16, 64, 8, 8}, kGpu));
  REQUIRE(cudnn_bn::supported(x, /*residual=*/false, /*relu=*/true));
  const auto counted = [&] { return bn->num_batches_tracked.item<std::int64_t>(); };
  {
    BatchCounts counts;
    bn_act(*bn, x);
    bn_act(*bn, x);
    CHECK(counted() == 0);
    counts.apply();
    CHECK(counted() == 2);
  }
  {
    BatchCounts failed_step;  // left without apply(): nothing counted
    bn_act(*bn, x);
  }
  CHECK(counted() == 2);
  bn_act(*bn, x);  // no scope: counted at once
  CHECK(counted() == 3);
  bn_act_set_backend(BnBackend::automatic);
}

TEST_CASE("conv3x3_relu_pool2 gives ATen's conv, bias, ReLU and max-pool in any input layout" * doctest::timeout(60)) {
  REQUIRE(torch::cuda::is_available());
  const bool tf32 = at::globalContext().allowTF32CuDNN();
  at::globalContext().setAllowTF32CuDNN(false);  // the kernel accumulates in full float32
  torch::manual_seed(5);
  for (const std::int64_t in : {1, 3})
    for (const std::int64_t out : {16, 32})
      for (const std::int64_t side : {28, 32})
        for (const bool nhwc : {false, true})
          for (const torch::ScalarType dtype : {torch::kFloat32, torch::kBFloat16}) {
            const std::string type = c10::toString(dtype);
            CAPTURE(in);
            CAPTURE(out);
            CAPTURE(side);
            CAPTURE(nhwc);
            CAPTURE(type);
            torch::Tensor x = torch::randn({8, in, side, side}, kGpu);
            if (nhwc) x = channels_last(x);
            const torch::Tensor w = channels_last(torch::randn({out, in, 3, 3}, kGpu).to(dtype));
            const torch::Tensor b = torch::randn({out}, kGpu).to(dtype);
            const torch::Tensor want = torch::max_pool2d(
                torch::relu(torch::conv2d(x, w.to(torch::kFloat32), b.to(torch::kFloat32), 1, 1)), 2);
            const std::optional<torch::Tensor> got = conv3x3_relu_pool2(x, w, b);
            REQUIRE(got.has_value());
            CHECK((got->scalar_type() == dtype));
            CHECK(got->is_contiguous(at::MemoryFormat::ChannelsLast));
            CHECK(relative_l2(*got, want) < (dtype == torch::kFloat32 ? 1e-6 : 1e-2));
          }
  at::globalContext().setAllowTF32CuDNN(tf32);
  const torch::Tensor x = torch::randn({2, 3, 8, 8}, kGpu);
  const torch::Tensor w24 = channels_last(torch::randn({24, 3, 3, 3}, kGpu));
  CHECK_FALSE(conv3x3_relu_pool2(x, w24, torch::randn({24}, kGpu)).has_value());  // 24 outputs: ATen's ops
  const torch::Tensor w16 = channels_last(torch::randn({16, 3, 3, 3}, kGpu));
  CHECK_FALSE(conv3x3_relu_pool2(x, w16, torch::Tensor()).has_value());  // no bias
  CHECK_FALSE(conv3x3_relu_pool2(x.to(torch::kBFloat16), w16, torch::randn({16}, kGpu)).has_value());
}

TEST_CASE(
    "pool_linear gives ATen's average pool and linear layer and their gradients, and declines what it does not take") {
  REQUIRE(torch::cuda::is_available());
  torch::manual_seed(11);
  struct Case {
    std::int64_t n, channels, side, classes;
    bool bias;
  };
  for (const torch::ScalarType dtype : {torch::kFloat32, torch::kBFloat16})
    for (const Case c :
         {Case{6, 512, 4, 10, true}, Case{3, 600, 7, 37, false}, Case{2, 5, 1, 1, true}, Case{70, 64, 2, 3, true}}) {
      const std::string type = c10::toString(dtype);
      CAPTURE(type);
      CAPTURE(c.channels);
      CAPTURE(c.side);
      const torch::Tensor x0 = channels_last(torch::randn({c.n, c.channels, c.side, c.side}, kGpu).to(dtype));
      const torch::Tensor w0 = torch::randn({c.classes, c.channels}, kGpu);
      const torch::Tensor b0 = c.bias ? torch::randn({c.classes}, kGpu) : torch::Tensor();
      const torch::Tensor g = torch::randn({c.n, c.classes}, kGpu);
      const auto leaf = [](const torch::Tensor& t) { return t.defined() ? t.clone().requires_grad_() : t; };
      const torch::Tensor x = leaf(x0), w = leaf(w0), b = leaf(b0), rx = leaf(x0), rw = leaf(w0), rb = leaf(b0);

      const torch::Tensor want = torch::linear(torch::adaptive_avg_pool2d(rx.to(torch::kFloat32), {1, 1}).flatten(1),
                                               rw, rb);
      const std::optional<torch::Tensor> got = pool_linear(x, w, b);
      REQUIRE(got.has_value());
      CHECK((got->scalar_type() == torch::kFloat32));
      CHECK(got->sizes() == want.sizes());
      CHECK(relative_l2(*got, want) < 1e-5);
      {
        torch::NoGradGuard no_grad;  // evaluation: the same logits
        CHECK(torch::equal(pool_linear(x0, w0, b0).value(), *got));
      }
      (*got * g).sum().backward();
      (want * g).sum().backward();
      CHECK((x.grad().scalar_type() == dtype));
      CHECK(x.grad().is_contiguous(at::MemoryFormat::ChannelsLast));
      CHECK(relative_l2(x.grad(), rx.grad()) < (dtype == torch::kFloat32 ? 1e-5 : 1e-2));  // bf16: its rounding
      CHECK(relative_l2(w.grad(), rw.grad()) < 1e-5);
      if (c.bias) CHECK(relative_l2(b.grad(), rb.grad()) < 1e-5);
    }
  const torch::Tensor w = torch::randn({10, 8}, kGpu);
  CHECK_FALSE(pool_linear(torch::randn({2, 8, 4, 4}, kGpu), w, {}).has_value());  // not channels-last
  CHECK_FALSE(pool_linear(channels_last(torch::randn({2, 8, 4, 4}, kGpu)), w.to(torch::kBFloat16), {}).has_value());
  CHECK_FALSE(pool_linear(channels_last(torch::randn({2, 8, 4, 4}, kGpu)), w, torch::randn({9}, kGpu)).has_value());
}

TEST_CASE("max_pool2 equals ATen's max-pool bit for bit, NaN included") {
  REQUIRE(torch::cuda::is_available());
  for (const torch::ScalarType dtype : {torch::kFloat32, torch::kBFloat16})
    for (const std::int64_t channels : {8, 32, 12}) {  // 12: not a multiple of 8, ATen's pool
      const std::string type = c10::toString(dtype);
      CAPTURE(type);
      CAPTURE(channels);
      torch::Tensor x = channels_last(torch::randn({4, channels, 16, 14}, kGpu).to(dtype));
      x.index_put_({0, 1, 3, 5}, std::numeric_limits<float>::quiet_NaN());
      const torch::Tensor got = max_pool2(x), want = torch::max_pool2d(x, 2);
      CHECK(got.sizes() == want.sizes());
      CHECK(torch::equal(got.isnan(), want.isnan()));
      CHECK(torch::equal(got.nan_to_num(0), want.nan_to_num(0)));
      CHECK(got.isnan().sum().item<std::int64_t>() == 1);
    }
}
