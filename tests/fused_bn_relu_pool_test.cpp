#include <torch/types.h>
#include <torch/utils.h>
// After LibTorch: Debian's c10 pulls in glog, whose CHECK must not replace doctest's.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "common/torch/builtin_nets/fused_bn_relu_pool.hpp"

namespace {

namespace nn = torch::nn;
using torch::Tensor;

Tensor channels_last(const Tensor& t) { return torch::empty_like(t, at::MemoryFormat::ChannelsLast).copy_(t); }

// Normal values on a grid of 1/32: two values of a pooling window are equal or 1/32 apart, never a
// rounding error apart, so both implementations pick the same winner (each rounds differently).
Tensor gridded_normal(at::IntArrayRef sizes, double stddev, double mean) {
  return channels_last(torch::round(torch::randn(sizes) * stddev * 32) / 32 + mean);
}

// The largest elementwise difference relative to the reference's largest magnitude.
double relative_gap(const Tensor& got, const Tensor& want) {
  const Tensor g = got.to(torch::kFloat64), w = want.to(torch::kFloat64);
  const double scale = std::max(1e-12, w.abs().max().item<double>());
  return (g - w).abs().max().item<double>() / scale;
}

// Two copies of one BatchNorm2d: the reference runs the three ATen ops in float64 (the exact values
// float32 should round to: ATen's own float32 statistics are summed in float and drift ~5e-5 at a
// batch of 128 x 28 x 28), the other bn_relu_pool in float32.
struct Pair {
  nn::BatchNorm2d reference{nullptr}, fused{nullptr};
  explicit Pair(std::int64_t channels, nn::BatchNormOptions options = {0}) {
    options.num_features(channels);
    reference = nn::BatchNorm2d(options);
    fused = nn::BatchNorm2d(options);
    torch::NoGradGuard no_grad;
    if (options.affine()) {
      fused->weight.uniform_(0.5, 1.5);
      fused->bias.uniform_(-0.5, 0.5);
      reference->weight.copy_(fused->weight);
      reference->bias.copy_(fused->bias);
    }
    reference->to(torch::kFloat64);
  }
};

struct Step {
  Tensor out, dx, dweight, dbias;
};

// One forward and backward through `block` with a fixed upstream gradient, in the module's dtype;
// the results in float64.
template <class Block>
Step run(const Tensor& input, const Tensor& upstream, nn::BatchNorm2d& bn, Block block) {
  const auto dtype = bn->running_mean.scalar_type();
  Tensor x = input.detach().to(dtype).requires_grad_(true);  // keeps the memory format
  bn->weight.mutable_grad() = Tensor();
  bn->bias.mutable_grad() = Tensor();
  Tensor out = block(bn, x);
  (out * upstream.to(dtype)).sum().backward();
  return {out.detach().to(torch::kFloat64), x.grad().to(torch::kFloat64), bn->weight.grad().to(torch::kFloat64),
          bn->bias.grad().to(torch::kFloat64)};
}

Tensor reference_block(nn::BatchNorm2d& bn, const Tensor& x) {
  return torch::max_pool2d(torch::relu(bn->forward(x)), 2);
}

}  // namespace

// The kernel builds this CPU runs, each pinned in turn ("avx512", "avx2", "baseline" on this
// machine); the widest again afterwards.
struct EveryKernelBuild {
  std::vector<std::string> isas = tandem::bn_relu_pool_isas();
  ~EveryKernelBuild() { tandem::bn_relu_pool_force_isa(""); }
};

TEST_CASE(
    "bn_relu_pool: training matches BatchNorm2d, ReLU and max_pool2d in values, gradients and running statistics") {
  struct Row {
    std::int64_t n, c, h, w;
    double mean;  // an offset on the input: statistics far from zero
    int threads;
  };
  const Row rows[] = {{128, 16, 28, 28, 0.0, 1}, {32, 32, 14, 14, 3.0, 1}, {5, 3, 6, 10, -2.0, 1},
                      {16, 16, 8, 8, 0.5, 2},    {2, 1, 4, 4, 0.0, 1},     {4, 19, 6, 6, 1.0, 1}};
  EveryKernelBuild builds;
  for (const std::string& isa : builds.isas) {
    MESSAGE("kernels: " << isa);
    tandem::bn_relu_pool_force_isa(isa);
    torch::manual_seed(7);
    for (const Row& r : rows) {
      CAPTURE(isa);
      CAPTURE(r.n);
      CAPTURE(r.c);
      CAPTURE(r.threads);
      const int threads_before = at::get_num_threads();
      at::set_num_threads(r.threads);
      Pair bn(r.c);
      for (int step = 0; step < 3; ++step) {
        const Tensor input = gridded_normal({r.n, r.c, r.h, r.w}, 2, r.mean);
        const Tensor upstream = torch::randn({r.n, r.c, r.h / 2, r.w / 2});
        REQUIRE(tandem::bn_relu_pool_is_fused(bn.fused, input));
        const Step want = run(input, upstream, bn.reference, reference_block);
        const Step got = run(input, upstream, bn.fused, tandem::bn_relu_pool);
        CHECK(got.out.is_contiguous(at::MemoryFormat::ChannelsLast));
        CHECK(relative_gap(got.out, want.out) < 1e-5);
        CHECK(relative_gap(got.dx, want.dx) < 1e-4);
        CHECK(relative_gap(got.dweight, want.dweight) < 1e-4);
        CHECK(relative_gap(got.dbias, want.dbias) < 1e-4);
        CHECK(relative_gap(bn.fused->running_mean, bn.reference->running_mean) < 1e-5);
        CHECK(relative_gap(bn.fused->running_var, bn.reference->running_var) < 1e-5);
        CHECK(bn.fused->num_batches_tracked.item<std::int64_t>() == step + 1);
      }
      at::set_num_threads(threads_before);
    }
  }
}

TEST_CASE("bn_relu_pool: pinning kernels this CPU cannot run is a UserError naming the ones it can") {
  CHECK_THROWS_WITH_AS(tandem::bn_relu_pool_force_isa("sse9"), doctest::Contains("it runs"), tandem::UserError);
}

TEST_CASE("bn_relu_pool: without a momentum the running statistics are the cumulative average, as BatchNorm2d's") {
  Pair bn(4, nn::BatchNormOptions(4).momentum(c10::nullopt));
  for (int step = 0; step < 3; ++step) {
    const Tensor input = gridded_normal({8, 4, 6, 6}, 1, step);
    const Tensor upstream = torch::randn({8, 4, 3, 3});
    run(input, upstream, bn.reference, reference_block);
    run(input, upstream, bn.fused, tandem::bn_relu_pool);
  }
  CHECK(relative_gap(bn.fused->running_mean, bn.reference->running_mean) < 1e-5);
  CHECK(relative_gap(bn.fused->running_var, bn.reference->running_var) < 1e-5);
}

TEST_CASE("bn_relu_pool: eval mode uses the running statistics and matches the ATen ops") {
  Pair bn(16);
  for (int step = 0; step < 4; ++step) {  // running statistics away from their initial 0 and 1
    const Tensor input = gridded_normal({16, 16, 8, 8}, 3, 1);
    run(input, torch::ones({16, 16, 4, 4}), bn.reference, reference_block);
    run(input, torch::ones({16, 16, 4, 4}), bn.fused, tandem::bn_relu_pool);
  }
  bn.reference->eval();
  bn.fused->eval();
  torch::NoGradGuard no_grad;
  const Tensor input = gridded_normal({16, 16, 8, 8}, 3, 1);
  REQUIRE(tandem::bn_relu_pool_is_fused(bn.fused, input));
  CHECK(relative_gap(tandem::bn_relu_pool(bn.fused, input), reference_block(bn.reference, input.to(torch::kFloat64))) <
        1e-5);
  CHECK(bn.fused->num_batches_tracked.item<std::int64_t>() == 4);  // eval leaves the statistics alone
}

TEST_CASE("bn_relu_pool: a tie sends the gradient to the window's first position, as max_pool2d does") {
  Pair bn(2);
  Tensor input = torch::zeros({2, 2, 2, 4});
  input.index_put_({0, 0, 0, 0}, 1.0f);  // image 0, channel 0, window 0: 1.0 at two positions
  input.index_put_({0, 0, 1, 1}, 1.0f);
  input.index_put_({1, 1, 0, 2}, -1.0f);
  input = channels_last(input);
  const Tensor upstream = torch::ones({2, 2, 1, 2});
  const Step want = run(input, upstream, bn.reference, reference_block);
  const Step got = run(input, upstream, bn.fused, tandem::bn_relu_pool);
  CHECK(relative_gap(got.dx, want.dx) < 1e-4);
  CHECK(relative_gap(got.dweight, want.dweight) < 1e-4);
}

TEST_CASE("bn_relu_pool: a NaN propagates to its window's output, as through ReLU and max_pool2d") {
  Pair bn(2);
  bn.reference->eval();
  bn.fused->eval();
  torch::NoGradGuard no_grad;
  Tensor input = torch::zeros({1, 2, 2, 4});
  input.index_put_({0, 1, 1, 3}, std::numeric_limits<float>::quiet_NaN());  // channel 1, window 1
  input = channels_last(input);
  REQUIRE(tandem::bn_relu_pool_is_fused(bn.fused, input));
  const Tensor got = tandem::bn_relu_pool(bn.fused, input);
  CHECK(std::isnan(got.index({0, 1, 0, 1}).item<float>()));
  const Tensor want = reference_block(bn.reference, input.to(torch::kFloat64));
  CHECK(std::isnan(want.index({0, 1, 0, 1}).item<double>()));
  CHECK(relative_gap(got.index({0, 0}), want.index({0, 0})) < 1e-6);
}

TEST_CASE("bn_relu_pool: inputs it does not fuse take the ATen ops and give their result") {
  struct Row {
    const char* why;
    Tensor input;
  };
  torch::manual_seed(3);
  const Row rows[] = {
      {"NCHW with several channels", torch::randn({4, 3, 6, 6})},
      {"an odd height", channels_last(torch::randn({4, 3, 7, 6}))},
      {"float64", channels_last(torch::randn({4, 3, 6, 6}, torch::kFloat64))},
  };
  for (const Row& r : rows) {
    CAPTURE(r.why);
    Pair bn(3);
    bn.reference->to(r.input.scalar_type());  // the same dtype on both sides: the same ops, the same bits
    bn.fused->to(r.input.scalar_type());
    CHECK_FALSE(tandem::bn_relu_pool_is_fused(bn.fused, r.input));
    const Tensor upstream = torch::randn({4, 3, r.input.size(2) / 2, 3}, r.input.options());
    const Step want = run(r.input, upstream, bn.reference, reference_block);
    const Step got = run(r.input, upstream, bn.fused, tandem::bn_relu_pool);
    CHECK(torch::equal(got.out, want.out));
    CHECK(torch::equal(got.dx, want.dx));
  }
  Pair no_affine(3, nn::BatchNormOptions(3).affine(false));
  CHECK_FALSE(tandem::bn_relu_pool_is_fused(no_affine.fused, channels_last(torch::randn({4, 3, 6, 6}))));
}
