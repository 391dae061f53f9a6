#include <torch/types.h>
#include <torch/utils.h>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "common/torch/builtin_nets/fused_bn_relu_pool.hpp"
#include "bench/bench_json.hpp"
#include "bench/block_options.hpp"

namespace tandem::bench {
namespace {

namespace nn = torch::nn;
using torch::Tensor;

struct Shape {
  std::int64_t channels, side;
};
constexpr Shape kShapes[] = {{16, 28}, {32, 14}};  // the cnn's two blocks on 28x28 input

struct Variant {
  std::string name;
  std::string isa;  // the fused op's kernel build; empty for the ATen ops
  at::MemoryFormat layout;
};

struct Timing {
  double forward_ms, train_ms;
};

template <class Fn>
double median_ms(const Fn& fn, int warmup, int steps) {
  for (int i = 0; i < warmup; ++i) fn();
  std::vector<double> ms;
  ms.reserve(static_cast<std::size_t>(steps));
  for (int i = 0; i < steps; ++i) {
    const auto start = std::chrono::steady_clock::now();
    fn();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  std::nth_element(ms.begin(), ms.begin() + static_cast<std::ptrdiff_t>(ms.size() / 2), ms.end());
  return ms[ms.size() / 2];
}

// One block in training mode: forward alone, and forward + backward from a fixed upstream gradient
// into the input and BatchNorm's affine parameters (the cnn's step needs all three).
Timing time_block(const Variant& v, const Shape& s, const BlockBenchOptions& o) {
  nn::BatchNorm2d bn(s.channels);
  const Tensor input = torch::randn({o.batch, s.channels, s.side, s.side}).contiguous(v.layout);
  const Tensor upstream = torch::randn({o.batch, s.channels, s.side / 2, s.side / 2}).contiguous(v.layout);
  const auto block = [&](const Tensor& x) {
    return v.isa.empty() ? torch::max_pool2d(torch::relu(bn->forward(x)), 2) : bn_relu_pool(bn, x);
  };
  if (!v.isa.empty()) bn_relu_pool_force_isa(v.isa);
  Timing t{};
  {
    torch::NoGradGuard no_grad;
    t.forward_ms = median_ms([&] { block(input); }, o.warmup, o.steps);
  }
  const Tensor x = input.detach().requires_grad_(true);
  t.train_ms = median_ms(
      [&] {
    x.mutable_grad() = Tensor();
    bn->weight.mutable_grad() = Tensor();
    bn->bias.mutable_grad() = Tensor();
    block(x).backward(upstream);
      },
      o.warmup, o.steps);
  bn_relu_pool_force_isa("");
  return t;
}

}  // namespace

int bench_block(const BlockBenchOptions& o) {
  torch::set_num_threads(o.threads);
  std::vector<Variant> variants;
  for (const std::string& isa : bn_relu_pool_isas())
    variants.push_back({"fused (" + isa + ")", isa, at::MemoryFormat::ChannelsLast});
  variants.push_back({"ATen ops, channels-last", "", at::MemoryFormat::ChannelsLast});
  variants.push_back({"ATen ops, NCHW", "", at::MemoryFormat::Contiguous});

  fmt::print("BatchNorm -> ReLU -> 2x2 max-pool, training mode, batch {}, {} thread(s); median of {} calls\n", o.batch,
             o.threads, o.steps);
  fmt::print("{:<12} {:<26} {:>12} {:>18} {:>16}\n", "block", "variant", "forward ms", "forward+backward ms",
             "vs ATen (CL)");
  Json rows = Json::array();
  for (const Shape& s : kShapes) {
    std::vector<Timing> timings;
    timings.reserve(variants.size());
    for (const Variant& v : variants) timings.push_back(time_block(v, s, o));
    const Timing& aten = timings[variants.size() - 2];
    const std::string block = fmt::format("{}x{}x{}", s.channels, s.side, s.side);
    for (std::size_t i = 0; i < variants.size(); ++i) {
      fmt::print("{:<12} {:<26} {:>12.3f} {:>18.3f} {:>15.2f}x\n", block, variants[i].name, timings[i].forward_ms,
                 timings[i].train_ms, timings[i].train_ms / aten.train_ms);
      rows.push_back({{"block", block},
                      {"variant", variants[i].name},
                      {"forward_ms", rounded(timings[i].forward_ms, 3)},
                      {"train_ms", rounded(timings[i].train_ms, 3)}});
    }
  }
  emit_json_line(
      {{"bench", "block"}, {"batch", o.batch}, {"threads", o.threads}, {"steps", o.steps}, {"results", rows}}, o.json);
  return 0;
}

}  // namespace tandem::bench
