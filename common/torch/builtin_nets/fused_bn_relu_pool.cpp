#include "common/torch/builtin_nets/fused_bn_relu_pool.hpp"

#include <ATen/Parallel.h>
#include <fmt/ranges.h>
#include <torch/autograd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <vector>

#include "common/error.hpp"
#include "common/torch/builtin_nets/fused_bn_relu_pool_kernels.hpp"

namespace tandem {

namespace fused_bn_relu_pool_kernels {
std::span<const Kernels* const> runnable() {
  static const std::vector<const Kernels*> sets = [] {
    std::vector<const Kernels*> s;
#if defined(__x86_64__)
    __builtin_cpu_init();
    const bool has_avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    if (has_avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
      s.push_back(&avx512);
    if (has_avx2) s.push_back(&avx2);
#endif
    s.push_back(&baseline);
    return s;
  }();
  return sets;
}
}  // namespace fused_bn_relu_pool_kernels

namespace {

using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

namespace kernels = fused_bn_relu_pool_kernels;
using kernels::Geometry;

std::atomic<const kernels::Kernels*> forced{nullptr};

const kernels::Kernels& chosen() {
  const kernels::Kernels* k = forced.load(std::memory_order_relaxed);
  return k != nullptr ? *k : *kernels::runnable().front();
}

std::int64_t out_rows(const Geometry& g) { return g.n * (g.h / 2); }

// The rows are split into at most one chunk per intra-op thread; each chunk adds into its own
// partial sums, added afterwards in chunk order, so results do not depend on which thread ran what.
std::int64_t chunk_count(std::int64_t items) {
  return std::max<std::int64_t>(1, std::min<std::int64_t>(at::get_num_threads(), items));
}
template <class Body>
void for_each_chunk(std::int64_t items, std::int64_t chunks, const Body& body) {
  at::parallel_for(0, chunks, 1, [&](std::int64_t first, std::int64_t last) {
    for (std::int64_t k = first; k < last; ++k) body(k, items * k / chunks, items * (k + 1) / chunks);
  });
}

// Two per-channel sums over `items` (pixels or pooled rows), chunk by chunk, then in chunk order.
template <class Body>
void chunked_sums(std::int64_t items, std::int64_t channels, std::vector<double>& first, std::vector<double>& second,
                  const Body& body) {
  const std::int64_t chunks = chunk_count(items);
  std::vector<double> partial(static_cast<std::size_t>(2 * channels * chunks), 0.0);
  for_each_chunk(items, chunks, [&](std::int64_t k, std::int64_t lo, std::int64_t hi) {
    body(lo, hi, partial.data() + 2 * channels * k, partial.data() + 2 * channels * k + channels);
  });
  first.assign(static_cast<std::size_t>(channels), 0.0);
  second.assign(static_cast<std::size_t>(channels), 0.0);
  for (std::int64_t k = 0; k < chunks; ++k)
    for (std::int64_t c = 0; c < channels; ++c) {
      first[c] += partial[2 * channels * k + c];
      second[c] += partial[2 * channels * k + channels + c];
    }
}

// Calls pass(first_row, end_row) over the pooled rows, a chunk per intra-op thread.
template <class Pass>
void for_row_chunks(const Geometry& g, const Pass& pass) {
  const std::int64_t rows = out_rows(g);
  for_each_chunk(rows, chunk_count(rows), [&](std::int64_t, std::int64_t lo, std::int64_t hi) { pass(lo, hi); });
}

void normalize_relu_pool(const float* x, const Geometry& g, const float* scale, const float* shift, float* out,
                         std::uint8_t* winner, float* winner_x) {
  for_row_chunks(g, [&](std::int64_t lo, std::int64_t hi) {
    chosen().normalize_relu_pool(x, g, lo, hi, scale, shift, out, winner, winner_x);
  });
}

Geometry geometry_of(const Tensor& x) { return {x.size(0), x.size(1), x.size(2), x.size(3)}; }

Tensor pooled_like(const Tensor& x, torch::ScalarType dtype) {
  return at::empty({x.size(0), x.size(1), x.size(2) / 2, x.size(3) / 2},
                   x.options().dtype(dtype).memory_format(at::MemoryFormat::ChannelsLast));
}

// Training mode: batch statistics, running statistics updated, winners kept for backward.
struct FusedTrainingBlock : torch::autograd::Function<FusedTrainingBlock> {
  static Tensor forward(AutogradContext* ctx, const Tensor& x, const Tensor& weight, const Tensor& bias,
                        const Tensor& running_mean, const Tensor& running_var, double momentum, double eps) {
    const Geometry g = geometry_of(x);
    const auto count = static_cast<double>(g.n * g.h * g.w);
    std::vector<double> sum, sumsq;
    chunked_sums(g.n * g.h * g.w, g.c, sum, sumsq, [&](std::int64_t lo, std::int64_t hi, double* s, double* q) {
      chosen().moments(x.data_ptr<float>(), g.c, lo, hi, s, q);
    });

    Tensor mean = at::empty({g.c}, x.options()), invstd = at::empty({g.c}, x.options());
    std::vector<float> scale(g.c), shift(g.c);
    float* rm = running_mean.data_ptr<float>();
    float* rv = running_var.data_ptr<float>();
    for (std::int64_t c = 0; c < g.c; ++c) {
      const double m = sum[c] / count, var = std::max(0.0, sumsq[c] / count - m * m);
      const double is = 1.0 / std::sqrt(var + eps);
      mean.data_ptr<float>()[c] = static_cast<float>(m);
      invstd.data_ptr<float>()[c] = static_cast<float>(is);
      scale[c] = static_cast<float>(weight.data_ptr<float>()[c] * is);
      shift[c] = static_cast<float>(bias.data_ptr<float>()[c] - m * weight.data_ptr<float>()[c] * is);
      rm[c] = static_cast<float>(momentum * m + (1 - momentum) * rm[c]);
      rv[c] = static_cast<float>(momentum * var * count / (count - 1) + (1 - momentum) * rv[c]);
    }

    Tensor out = pooled_like(x, torch::kFloat32), winner = pooled_like(x, torch::kUInt8);
    Tensor winner_x = pooled_like(x, torch::kFloat32);
    normalize_relu_pool(x.data_ptr<float>(), g, scale.data(), shift.data(), out.data_ptr<float>(),
                        winner.data_ptr<std::uint8_t>(), winner_x.data_ptr<float>());
    ctx->save_for_backward({x, weight});
    ctx->saved_data["mean"] = mean;
    ctx->saved_data["invstd"] = invstd;
    ctx->saved_data["winner"] = winner;
    ctx->saved_data["winner_x"] = winner_x;
    return out;
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const Tensor& x = saved[0];
    const Tensor& weight = saved[1];
    const Tensor mean = ctx->saved_data["mean"].toTensor(), invstd = ctx->saved_data["invstd"].toTensor();
    const Tensor winner = ctx->saved_data["winner"].toTensor(), winner_x = ctx->saved_data["winner_x"].toTensor();
    const Tensor dp = grads[0].contiguous(at::MemoryFormat::ChannelsLast);
    const Geometry g = geometry_of(x);
    const auto count = static_cast<double>(g.n * g.h * g.w);
    const float* xs = x.data_ptr<float>();
    const float* dps = dp.data_ptr<float>();
    const std::uint8_t* won = winner.data_ptr<std::uint8_t>();
    const float* means = mean.data_ptr<float>();

    std::vector<double> sum_dz, sum_dz_centered;
    chunked_sums(out_rows(g), g.c, sum_dz, sum_dz_centered,
                 [&](std::int64_t lo, std::int64_t hi, double* s, double* q) {
      chosen().winner_sums(g, lo, hi, dps, won, winner_x.data_ptr<float>(), means, s, q);
    });
    Tensor dweight = at::empty({g.c}, x.options()), dbias = at::empty({g.c}, x.options());
    std::vector<float> a(g.c), b(g.c), e(g.c);
    for (std::int64_t c = 0; c < g.c; ++c) {
      const double is = invstd.data_ptr<float>()[c], w = weight.data_ptr<float>()[c];
      dweight.data_ptr<float>()[c] = static_cast<float>(sum_dz_centered[c] * is);
      dbias.data_ptr<float>()[c] = static_cast<float>(sum_dz[c]);
      a[c] = static_cast<float>(w * is);
      b[c] = static_cast<float>(-w * is * is * is * sum_dz_centered[c] / count);
      e[c] = static_cast<float>(-w * is * sum_dz[c] / count);
    }
    Tensor dx;
    if (ctx->needs_input_grad(0)) {
      dx = at::empty_like(x, at::MemoryFormat::ChannelsLast);
      float* dxs = dx.data_ptr<float>();
      for_row_chunks(g, [&](std::int64_t lo, std::int64_t hi) {
        chosen().input_gradient(xs, g, lo, hi, dps, won, means, a.data(), b.data(), e.data(), dxs);
      });
    }
    return {dx, dweight, dbias, Tensor(), Tensor(), Tensor(), Tensor()};
  }
};

// Eval mode, nothing to differentiate: the running statistics folded into one scale and shift.
Tensor fused_inference_block(torch::nn::BatchNorm2d& bn, const Tensor& x) {
  const Geometry g = geometry_of(x);
  const double eps = bn->options.eps();
  std::vector<float> scale(g.c), shift(g.c);
  const float* w = bn->weight.data_ptr<float>();
  const float* b = bn->bias.data_ptr<float>();
  const float* rm = bn->running_mean.data_ptr<float>();
  const float* rv = bn->running_var.data_ptr<float>();
  for (std::int64_t c = 0; c < g.c; ++c) {
    const double is = 1.0 / std::sqrt(static_cast<double>(rv[c]) + eps);
    scale[c] = static_cast<float>(w[c] * is);
    shift[c] = static_cast<float>(b[c] - rm[c] * w[c] * is);
  }
  Tensor out = pooled_like(x, torch::kFloat32);
  normalize_relu_pool(x.data_ptr<float>(), g, scale.data(), shift.data(), out.data_ptr<float>(), nullptr, nullptr);
  return out;
}

bool is_plain_float_cpu(const Tensor& t, std::int64_t numel) {
  return t.defined() && t.device().is_cpu() && t.scalar_type() == torch::kFloat32 && t.is_contiguous() &&
         t.numel() == numel;
}

}  // namespace

bool bn_relu_pool_is_fused(const torch::nn::BatchNorm2d& bn, const Tensor& x) {
  const auto& o = bn->options;
  if (x.dim() != 4 || !x.device().is_cpu() || x.scalar_type() != torch::kFloat32 ||
      !x.is_contiguous(at::MemoryFormat::ChannelsLast) || x.size(1) != o.num_features() || x.size(0) == 0 ||
      x.size(2) < 2 || x.size(3) < 2 || x.size(2) % 2 != 0 || x.size(3) % 2 != 0 || !o.affine() ||
      !o.track_running_stats())
    return false;
  const std::int64_t c = x.size(1);
  if (!is_plain_float_cpu(bn->weight, c) || !is_plain_float_cpu(bn->bias, c) ||
      !is_plain_float_cpu(bn->running_mean, c) || !is_plain_float_cpu(bn->running_var, c))
    return false;
  if (bn->is_training()) return x.size(0) * x.size(2) * x.size(3) > 1;  // one value per channel: ATen's own error
  const bool wants_grad = torch::GradMode::is_enabled() &&
                          (x.requires_grad() || bn->weight.requires_grad() || bn->bias.requires_grad());
  return !wants_grad;
}

std::vector<std::string> bn_relu_pool_isas() {
  std::vector<std::string> names;
  for (const auto* k : fused_bn_relu_pool_kernels::runnable()) names.emplace_back(k->isa);
  return names;
}

void bn_relu_pool_force_isa(const std::string& isa) {
  if (isa.empty()) {
    forced.store(nullptr, std::memory_order_relaxed);
    return;
  }
  for (const auto* k : fused_bn_relu_pool_kernels::runnable())
    if (isa == k->isa) {
      forced.store(k, std::memory_order_relaxed);
      return;
    }
  fail("bn_relu_pool: this CPU does not run the '{}' kernels; it runs {}", isa, fmt::join(bn_relu_pool_isas(), ", "));
}

Tensor bn_relu_pool(torch::nn::BatchNorm2d& bn, const Tensor& x) {
  if (!bn_relu_pool_is_fused(bn, x)) return torch::max_pool2d(torch::relu(bn->forward(x)), 2);
  if (!bn->is_training()) return fused_inference_block(bn, x);
  // nn::BatchNorm2d's momentum rule: a fixed factor, or (momentum unset) the cumulative average.
  double momentum = bn->options.momentum().value_or(0.0);
  if (bn->num_batches_tracked.defined()) {
    torch::NoGradGuard no_grad;
    bn->num_batches_tracked += 1;
    if (!bn->options.momentum()) momentum = 1.0 / bn->num_batches_tracked.item<double>();
  }
  return FusedTrainingBlock::apply(x, bn->weight, bn->bias, bn->running_mean, bn->running_var, momentum,
                                   bn->options.eps());
}

}  // namespace tandem
