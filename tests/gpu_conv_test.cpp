// GPU: Tandem's convolution paths against ATen's: the residual block input's gradient blended by
// cuDNN's graph API (common/torch/builtin_nets/cudnn_conv.hpp) and the first convolution's kernels
// (common/torch/builtin_nets/stem_conv.hpp). Without a GPU this binary prints SKIP and exits 77.
#include <torch/torch.h>
// After LibTorch: Debian's c10 pulls in glog, whose CHECK must not replace doctest's.
#include <doctest/doctest.h>

#include <string>

#include "common/torch/builtin_nets/cudnn_conv.hpp"
#include "common/torch/builtin_nets/stem_conv.hpp"
#include "tests/harness.hpp"
#include "tests/tensor_compare.hpp"

TANDEM_GPU_TEST_BINARY();

using namespace tandem;
using testing::channels_last;
using testing::kGpu;
using testing::relative_l2;

TEST_CASE("conv2d_sharing_input's input gradient is the sum of both uses, blended by cuDNN into the other's") {
  REQUIRE(torch::cuda::is_available());
  for (const torch::ScalarType dtype : {torch::kFloat32, torch::kBFloat16})
    for (const std::int64_t stride : {1, 2})
      for (const bool kept_elsewhere : {false, true}) {
        const std::string type = c10::toString(dtype);
        CAPTURE(type);
        CAPTURE(stride);
        CAPTURE(kept_elsewhere);
        torch::manual_seed(4);
        const torch::Tensor x0 = channels_last(torch::randn({8, 64, 16, 16}, kGpu).to(dtype));
        const torch::Tensor w0 = channels_last(torch::randn({64, 64, 3, 3}, kGpu).to(dtype) * 0.05);
        const torch::Tensor g2 = channels_last(torch::randn({8, 64, 16, 16}, kGpu).to(dtype));

        const torch::Tensor x = x0.clone().requires_grad_(), w = w0.clone().requires_grad_();
        const auto [y, x_again] = conv2d_sharing_input(x, w, {stride, stride}, {1, 1});
        torch::Tensor kept;  // a hook holding the other use's gradient: then it is not to be written
        if (kept_elsewhere) x_again.register_hook([&](const torch::Tensor& g) { kept = g; });
        const torch::Tensor g1 = channels_last(torch::randn_like(y));
        ((y * g1).sum() + (x_again * g2).sum()).backward();

        const torch::Tensor rx = x0.clone().requires_grad_(), rw = w0.clone().requires_grad_();
        const torch::Tensor ry = at::conv2d(rx, rw, {}, {stride, stride}, {1, 1});
        ((ry * g1).sum() + (rx * g2).sum()).backward();
        const double tolerance = dtype == torch::kFloat32 ? 5e-3 : 2e-2;  // TF32 / bf16 convolutions
        CHECK(relative_l2(y, ry) < tolerance);
        CHECK(relative_l2(x.grad(), rx.grad()) < tolerance);
        CHECK(relative_l2(w.grad(), rw.grad()) < tolerance);
        if (kept_elsewhere) CHECK(torch::equal(kept, g2));  // x_again's gradient, d(x_again * g2) = g2
      }
}

TEST_CASE("conv_dgrad_accumulate adds the data gradient to what dx holds") {
  REQUIRE(torch::cuda::is_available());
  torch::manual_seed(6);
  for (const torch::ScalarType dtype : {torch::kFloat32, torch::kBFloat16}) {
    const std::string type = c10::toString(dtype);
    CAPTURE(type);
    const torch::Tensor x = channels_last(torch::randn({4, 32, 8, 8}, kGpu).to(dtype));
    const torch::Tensor w = channels_last(torch::randn({64, 32, 3, 3}, kGpu).to(dtype) * 0.1);
    const torch::Tensor dy = channels_last(torch::randn({4, 64, 4, 4}, kGpu).to(dtype));
    const torch::Tensor before = channels_last(torch::randn({4, 32, 8, 8}, kGpu).to(dtype));
    const torch::Tensor dx = before.clone();
    REQUIRE(conv_dgrad_accumulate(dy, w, dx, {2, 2}, {1, 1}));
    const torch::Tensor dgrad = std::get<0>(at::convolution_backward(dy, x, w, c10::nullopt, {2, 2}, {1, 1}, {1, 1},
                                                                     false, {0, 0}, 1, {true, false, false}));
    CHECK(relative_l2(dx, before + dgrad) < (dtype == torch::kFloat32 ? 5e-3 : 2e-2));
  }
}

TEST_CASE(
    "stem_conv3x3 gives ATen's convolution and gradients (its weight gradient the same bits every run), and its bias-ReLU form ATen's") {
  REQUIRE(torch::cuda::is_available());
  const bool tf32 = at::globalContext().allowTF32CuDNN();
  at::globalContext().setAllowTF32CuDNN(false);  // the kernels multiply in float32
  struct Case {
    std::int64_t n, channels, outputs, height, width;
  };
  // The last two: more runs than blocks (each block walks several, the next one's patch in flight),
  // and a last band of rows past the image's bottom.
  for (const torch::ScalarType dtype : {torch::kFloat32, torch::kBFloat16})
    for (const Case c : {Case{2, 3, 64, 7, 30}, Case{2, 1, 32, 8, 8}, Case{2, 4, 32, 5, 70}, Case{2, 2, 64, 3, 9},
                         Case{160, 3, 64, 32, 32}, Case{40, 3, 32, 33, 65}}) {
      const std::string type = c10::toString(dtype);
      CAPTURE(type);
      CAPTURE(c.channels);
      CAPTURE(c.width);
      CAPTURE(c.n);
      torch::manual_seed(7);
      const torch::Tensor x0 = channels_last(torch::randn({c.n, c.channels, c.height, c.width}, kGpu).to(dtype));
      const torch::Tensor w0 = channels_last(torch::randn({c.outputs, c.channels, 3, 3}, kGpu).to(dtype));
      REQUIRE(stem_conv_applies(x0, w0, {1, 1}, {1, 1}));
      const torch::Tensor x = x0.clone().requires_grad_(), w = w0.clone().requires_grad_();
      const torch::Tensor y = stem_conv3x3(x, w);
      const torch::Tensor g = channels_last(torch::randn(y.sizes(), kGpu).to(dtype));
      (y * g).sum().backward();
      const torch::Tensor rx = x0.clone().requires_grad_(), rw = w0.clone().requires_grad_();
      const torch::Tensor ry = at::conv2d(rx, rw, {}, {1, 1}, {1, 1});
      (ry * g).sum().backward();
      const double tolerance = dtype == torch::kFloat32 ? 1e-5 : 1e-2;
      CHECK(y.is_contiguous(at::MemoryFormat::ChannelsLast));
      CHECK(relative_l2(y, ry) < tolerance);
      CHECK(relative_l2(w.grad(), rw.grad()) < tolerance);
      CHECK(relative_l2(x.grad(), rx.grad()) < tolerance);
      {
        torch::NoGradGuard no_grad;
        const torch::Tensor b0 = torch::randn({c.outputs}, kGpu).to(dtype);
        CHECK(relative_l2(stem_conv3x3_bias_relu(x0, w0, b0), torch::relu(at::conv2d(x0, w0, b0, {1, 1}, {1, 1}))) <
              tolerance);
      }
      const torch::Tensor first = w.grad().clone();
      w.mutable_grad() = torch::Tensor();
      (stem_conv3x3(x0, w) * g).sum().backward();
      CHECK(torch::equal(w.grad(), first));
    }
  const auto cl = [](const torch::Tensor& t) { return t.contiguous(at::MemoryFormat::ChannelsLast); };
  CHECK_FALSE(stem_conv_applies(cl(torch::randn({2, 8, 8, 8}, kGpu)), cl(torch::randn({32, 8, 3, 3}, kGpu)), {1, 1},
                                {1, 1}));  // 8 channels: cuDNN's tensor cores take those
  CHECK_FALSE(stem_conv_applies(cl(torch::randn({2, 3, 8, 8}, kGpu)), cl(torch::randn({16, 3, 3, 3}, kGpu)), {1, 1},
                                {1, 1}));  // 16 outputs: a run would be 128 pixels, mostly idle
  at::globalContext().setAllowTF32CuDNN(tf32);
}
