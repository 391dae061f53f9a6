#include "common/torch/conv_pool.hpp"

#include <ATen/Functions.h>

#include <cstdint>
#include <stdexcept>

#ifdef TANDEM_GPU_KERNELS
#include <c10/cuda/CUDAStream.h>

#include "common/torch/conv_pool_kernels.hpp"
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

std::optional<torch::Tensor> pool_linear(const torch::Tensor& x, const torch::Tensor& weight,
                                         const torch::Tensor& bias) {
  if (torch::GradMode::is_enabled() && (x.requires_grad() || weight.requires_grad() || bias.requires_grad()))
    throw std::logic_error("pool_linear is for evaluation: it has no gradient");
  const auto dtype = kernel_dtype(x);
  const auto float32_beside_x = [&](const torch::Tensor& t) {
    return t.device() == x.device() && t.scalar_type() == torch::kFloat32 && t.is_contiguous();
  };
  if (!dtype || !x.is_cuda() || x.dim() != 4 || !x.is_contiguous(at::MemoryFormat::ChannelsLast) || weight.dim() != 2 ||
      weight.size(1) != x.size(1) || !float32_beside_x(weight) ||
      (bias.defined() && (bias.dim() != 1 || bias.size(0) != weight.size(0) || !float32_beside_x(bias))) ||
      !conv_pool_kernels::pool_linear_supports(x.size(2) * x.size(3), x.size(1), weight.size(0)))
    return std::nullopt;
  torch::Tensor logits = torch::empty({x.size(0), weight.size(0)}, weight.options());
  conv_pool_kernels::pool_linear({.x = x.data_ptr(),
                                  .n = x.size(0),
                                  .pixels = x.size(2) * x.size(3),
                                  .channels = x.size(1),
                                  .weight = weight.data_ptr<float>(),
                                  .bias = bias.defined() ? bias.data_ptr<float>() : nullptr,
                                  .classes = weight.size(0),
                                  .logits = logits.data_ptr<float>()},
                                 *dtype, stream_of(x));
  return logits;
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
