#include "common/torch/builtin_nets/stem_conv.hpp"

#include <ATen/Functions.h>
#include <torch/autograd.h>

#include <stdexcept>

#include "common/error.hpp"

#ifdef TANDEM_GPU_KERNELS
#include <c10/cuda/CUDAStream.h>

#include "common/torch/builtin_nets/cudnn_conv.hpp"
#include "common/torch/builtin_nets/scratch.hpp"
#include "common/torch/builtin_nets/stem_conv_kernels.hpp"
#endif

namespace tandem {

using torch::Tensor;

#ifdef TANDEM_GPU_KERNELS

namespace {

namespace kernels = stem_conv_kernels;

kernels::Shape shape_of(const Tensor& x, const Tensor& w) {
  return {.n = x.size(0), .height = x.size(2), .width = x.size(3), .in_channels = x.size(1), .out_channels = w.size(0)};
}

kernels::DType dtype_of(const Tensor& t) {
  return t.scalar_type() == torch::kFloat32 ? kernels::DType::f32 : kernels::DType::bf16;
}

cuda::StreamHandle stream_of(const Tensor& t) { return c10::cuda::getCurrentCUDAStream(t.device().index()).stream(); }

struct StemConv : torch::autograd::Function<StemConv> {
  static Tensor forward(torch::autograd::AutogradContext* ctx, const Tensor& x, const Tensor& w) {
    Tensor y = torch::empty({x.size(0), w.size(0), x.size(2), x.size(3)},
                            x.options().memory_format(at::MemoryFormat::ChannelsLast));
    kernels::forward(x.data_ptr(), w.data_ptr(), {}, y.data_ptr(), shape_of(x, w), dtype_of(x), stream_of(x));
    ctx->save_for_backward({x, w});
    return y;
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const Tensor &x = saved[0], &w = saved[1];
    const Tensor dy = grads[0].to(x.scalar_type()).contiguous(at::MemoryFormat::ChannelsLast);
    Tensor dx, dw;
    if (ctx->needs_input_grad(1)) {
      const kernels::Shape s = shape_of(x, w);
      dw = torch::empty_like(w, at::MemoryFormat::ChannelsLast);
      const Tensor workspace = scratch_bytes(static_cast<std::int64_t>(kernels::weight_grad_workspace_bytes(s)), x);
      kernels::weight_grad(x.data_ptr(), dy.data_ptr(), dw.data_ptr(), workspace.data_ptr(), s, dtype_of(x),
                           stream_of(x));
    }
    if (ctx->needs_input_grad(0)) dx = std::get<0>(conv_backward(dy, x, w, {1, 1}, {1, 1}, {true, false, false}));
    return {dx, dw};
  }
};

}  // namespace

bool stem_conv_applies(const Tensor& x, const Tensor& w, at::IntArrayRef stride, at::IntArrayRef padding) {
  if (!x.is_cuda() || x.dim() != 4 || w.dim() != 4 || w.device() != x.device()) return false;
  if (x.scalar_type() != torch::kFloat32 && x.scalar_type() != torch::kBFloat16) return false;
  if (w.scalar_type() != x.scalar_type() || w.size(1) != x.size(1) || w.size(2) != 3 || w.size(3) != 3) return false;
  if (stride != at::IntArrayRef{1, 1} || padding != at::IntArrayRef{1, 1}) return false;
  if (!x.is_contiguous(at::MemoryFormat::ChannelsLast) || !w.is_contiguous(at::MemoryFormat::ChannelsLast))
    return false;
  return kernels::supports(shape_of(x, w));
}

Tensor stem_conv3x3(const Tensor& x, const Tensor& w) { return StemConv::apply(x, w); }

Tensor stem_conv3x3_bias_relu(const Tensor& x, const Tensor& w, const Tensor& bias) {
  if (torch::GradMode::is_enabled() && (x.requires_grad() || w.requires_grad() || bias.requires_grad()))
    throw std::logic_error("stem_conv3x3_bias_relu is for evaluation: it has no gradient");
  if (bias.scalar_type() != w.scalar_type() || !bias.is_contiguous() || bias.numel() != w.size(0) ||
      bias.device() != w.device())
    throw std::logic_error("stem_conv3x3_bias_relu: the bias is not a contiguous [K] of the weight's dtype and device");
  Tensor y = torch::empty({x.size(0), w.size(0), x.size(2), x.size(3)},
                          x.options().memory_format(at::MemoryFormat::ChannelsLast));
  kernels::forward(x.data_ptr(), w.data_ptr(), {.bias = bias.data_ptr(), .relu = true}, y.data_ptr(), shape_of(x, w),
                   dtype_of(x), stream_of(x));
  return y;
}

#else

bool stem_conv_applies(const Tensor&, const Tensor&, at::IntArrayRef, at::IntArrayRef) { return false; }

Tensor stem_conv3x3(const Tensor&, const Tensor&) {
  fail("stem_conv3x3 needs Tandem's GPU kernels, which this build lacks: check stem_conv_applies() first");
}

Tensor stem_conv3x3_bias_relu(const Tensor&, const Tensor&, const Tensor&) {
  fail("stem_conv3x3_bias_relu needs Tandem's GPU kernels, which this build lacks: check stem_conv_applies() first");
}

#endif

}  // namespace tandem
