#include "common/torch/builtin_nets/conv_pool.hpp"

#include <ATen/Functions.h>
#include <torch/autograd.h>

#include <cstdint>
#include <vector>

#ifdef TANDEM_GPU_KERNELS
#include <c10/cuda/CUDAStream.h>

#include "common/torch/builtin_nets/conv_pool_kernels.hpp"
#endif

namespace tandem {

#ifdef TANDEM_GPU_KERNELS

namespace {

std::optional<conv_pool_kernels::DType> kernel_dtype(const torch::Tensor& t) {
  if (t.scalar_type() == torch::kFloat32) return conv_pool_kernels::DType::f32;
  if (t.scalar_type() == torch::kBFloat16) return conv_pool_kernels::DType::bf16;
  return std::nullopt;
}

bool vector_aligned(const torch::Tensor& t) { return reinterpret_cast<std::uintptr_t>(t.data_ptr()) % 16 == 0; }

cuda::StreamHandle stream_of(const torch::Tensor& t) {
  return c10::cuda::getCurrentCUDAStream(t.device().index()).stream();
}

}  // namespace

std::optional<torch::Tensor> conv3x3_relu_pool2(const torch::Tensor& x, const torch::Tensor& weight,
                                                const torch::Tensor& bias) {
  const auto dtype = kernel_dtype(weight);
  if (!dtype || !x.is_cuda() || x.dim() != 4 || x.scalar_type() != torch::kFloat32 || !bias.defined() ||
      bias.scalar_type() != weight.scalar_type() || !bias.is_contiguous() || weight.dim() != 4 || weight.size(2) != 3 ||
      weight.size(3) != 3 || weight.size(1) != x.size(1) || !weight.is_contiguous(at::MemoryFormat::ChannelsLast) ||
      weight.device() != x.device() ||
      !conv_pool_kernels::conv3x3_relu_pool2_supports(x.size(1), weight.size(0), x.size(2), x.size(3)))
    return std::nullopt;
  torch::Tensor out = torch::empty({x.size(0), weight.size(0), x.size(2) / 2, x.size(3) / 2},
                                   weight.options().memory_format(at::MemoryFormat::ChannelsLast));
  conv_pool_kernels::conv3x3_relu_pool2({.x = x.data_ptr<float>(),
                                         .n = x.size(0),
                                         .in_channels = x.size(1),
                                         .height = x.size(2),
                                         .width = x.size(3),
                                         .stride_n = x.stride(0),
                                         .stride_c = x.stride(1),
                                         .stride_h = x.stride(2),
                                         .stride_w = x.stride(3),
                                         .weight = weight.data_ptr(),
                                         .bias = bias.data_ptr(),
                                         .out_channels = weight.size(0),
                                         .out = out.data_ptr()},
                                        *dtype, stream_of(x));
  return out;
}

torch::Tensor max_pool2(const torch::Tensor& x) {
  const auto dtype = kernel_dtype(x);
  if (!dtype || !x.is_cuda() || x.dim() != 4 || x.size(1) % 8 != 0 || x.size(2) % 2 != 0 || x.size(3) % 2 != 0 ||
      !x.is_contiguous(at::MemoryFormat::ChannelsLast) || !vector_aligned(x))
    return torch::max_pool2d(x, 2);
  torch::Tensor out = torch::empty({x.size(0), x.size(1), x.size(2) / 2, x.size(3) / 2},
                                   x.options().memory_format(at::MemoryFormat::ChannelsLast));
  conv_pool_kernels::max_pool2_nhwc(x.data_ptr(), out.data_ptr(), x.size(0), x.size(2), x.size(3), x.size(1), *dtype,
                                    stream_of(x));
  return out;
}

namespace {

// The forward's launch: float32 logits, and the per-image means into `means` where it is defined.
torch::Tensor pool_linear_logits(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                                 const torch::Tensor& means) {
  torch::Tensor logits = torch::empty({x.size(0), weight.size(0)}, weight.options());
  conv_pool_kernels::pool_linear({.x = x.data_ptr(),
                                  .n = x.size(0),
                                  .pixels = x.size(2) * x.size(3),
                                  .channels = x.size(1),
                                  .weight = weight.data_ptr<float>(),
                                  .bias = bias.defined() ? bias.data_ptr<float>() : nullptr,
                                  .classes = weight.size(0),
                                  .logits = logits.data_ptr<float>(),
                                  .means = means.defined() ? means.data_ptr<float>() : nullptr},
                                 *kernel_dtype(x), stream_of(x));
  return logits;
}

// The head as an autograd op: the forward keeps the per-image means (float32 [N, C], 2 KB an image
// at 512 channels), the backward is one launch. `bias` is defined: autograd takes no undefined input.
struct PoolLinearOp : torch::autograd::Function<PoolLinearOp> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& weight, const torch::Tensor& bias) {
    const torch::Tensor means = torch::empty({x.size(0), x.size(1)}, weight.options());
    ctx->save_for_backward({weight, means});
    ctx->saved_data["x_sizes"] = x.sizes().vec();
    ctx->saved_data["x_dtype"] = static_cast<std::int64_t>(x.scalar_type());
    return pool_linear_logits(x, weight, bias, means);
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &weight = saved[0], &means = saved[1];
    const torch::Tensor dlogits = grads[0].to(torch::kFloat32).contiguous();
    const std::vector<std::int64_t> sizes = ctx->saved_data["x_sizes"].toIntVector();
    const auto dtype = static_cast<torch::ScalarType>(ctx->saved_data["x_dtype"].toInt());
    const torch::Tensor dx = torch::empty(sizes,
                                          weight.options().dtype(dtype).memory_format(at::MemoryFormat::ChannelsLast));
    const torch::Tensor dweight = torch::empty_like(weight);
    const torch::Tensor dbias = torch::empty({weight.size(0)}, weight.options());
    conv_pool_kernels::pool_linear_backward({.dlogits = dlogits.data_ptr<float>(),
                                             .weight = weight.data_ptr<float>(),
                                             .means = means.data_ptr<float>(),
                                             .n = sizes[0],
                                             .pixels = sizes[2] * sizes[3],
                                             .channels = sizes[1],
                                             .classes = weight.size(0),
                                             .dx = dx.data_ptr(),
                                             .dweight = dweight.data_ptr<float>(),
                                             .dbias = dbias.data_ptr<float>()},
                                            *kernel_dtype(dx), stream_of(dx));
    const auto wanted = [&](std::size_t i, const torch::Tensor& g) {
      return ctx->needs_input_grad(i) ? g : torch::Tensor();
    };
    return {wanted(0, dx), wanted(1, dweight), wanted(2, dbias)};
  }
};

}  // namespace

std::optional<torch::Tensor> pool_linear(const torch::Tensor& x, const torch::Tensor& weight,
                                         const torch::Tensor& bias) {
  const auto dtype = kernel_dtype(x);
  const auto float32_beside_x = [&](const torch::Tensor& t) {
    return t.device() == x.device() && t.scalar_type() == torch::kFloat32 && t.is_contiguous();
  };
  if (!dtype || !x.is_cuda() || x.dim() != 4 || !x.is_contiguous(at::MemoryFormat::ChannelsLast) || weight.dim() != 2 ||
      weight.size(1) != x.size(1) || !float32_beside_x(weight) ||
      (bias.defined() && (bias.dim() != 1 || bias.size(0) != weight.size(0) || !float32_beside_x(bias))) ||
      !conv_pool_kernels::pool_linear_supports(x.size(2) * x.size(3), x.size(1), weight.size(0)))
    return std::nullopt;
  if (!torch::GradMode::is_enabled() ||
      !(x.requires_grad() || weight.requires_grad() || (bias.defined() && bias.requires_grad())))
    return pool_linear_logits(x, weight, bias, {});
  // A bias-less head adds zeros that want no gradient.
  return PoolLinearOp::apply(x, weight, bias.defined() ? bias : torch::zeros({weight.size(0)}, weight.options()));
}

#else

std::optional<torch::Tensor> pool_linear(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&) {
  return std::nullopt;
}

std::optional<torch::Tensor> conv3x3_relu_pool2(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&) {
  return std::nullopt;
}

torch::Tensor max_pool2(const torch::Tensor& x) { return torch::max_pool2d(x, 2); }

#endif

}  // namespace tandem
