#include "common/torch/builtin_nets/weight_prep.hpp"

#include <ATen/Functions.h>
#include <torch/autograd.h>

#ifdef TANDEM_GPU_KERNELS
#include <c10/cuda/CUDAStream.h>

#include "common/torch/builtin_nets/weight_prep_kernels.hpp"
#endif

namespace tandem {

using torch::Tensor;

#ifdef TANDEM_GPU_KERNELS

namespace {

namespace kernels = weight_prep_kernels;

kernels::Weight job(const Tensor& from, const Tensor& to) {
  return {.src = from.data_ptr(),
          .dst = to.data_ptr(),
          .out_channels = from.size(0),
          .in_channels = from.size(1),
          .kernel_area = from.numel() / (from.size(0) * from.size(1))};
}

kernels::DType kernel_dtype(torch::ScalarType t) {
  return t == torch::kFloat32 ? kernels::DType::f32 : kernels::DType::bf16;
}

struct ToChannelsLast : torch::autograd::Function<ToChannelsLast> {
  // A TensorList, not a std::vector: autograd takes only the former's elements for inputs.
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, at::TensorList weights,
                                                std::int64_t dtype) {
    const auto type = static_cast<torch::ScalarType>(dtype);
    std::vector<Tensor> in, out;  // `in` keeps any contiguous copy alive until the launch
    std::vector<kernels::Weight> jobs;
    for (const Tensor& w : weights) {
      in.push_back(w.contiguous());
      out.push_back(torch::empty(w.sizes(), w.options().dtype(type).memory_format(at::MemoryFormat::ChannelsLast)));
      jobs.push_back(job(in.back(), out.back()));
    }
    kernels::to_channels_last(jobs, kernel_dtype(type), c10::cuda::getCurrentCUDAStream().stream());
    ctx->saved_data["dtype"] = dtype;
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto type = static_cast<torch::ScalarType>(ctx->saved_data["dtype"].toInt());
    torch::autograd::variable_list out(grads.size() + 1);  // + the dtype argument's (none)
    std::vector<Tensor> in;                                // keeps converted gradients alive until the launch
    std::vector<kernels::Weight> jobs;
    for (std::size_t i = 0; i < grads.size(); ++i) {
      if (!grads[i].defined()) continue;  // a weight this forward did not use
      in.push_back(grads[i].to(type).contiguous(at::MemoryFormat::ChannelsLast));
      out[i] = torch::empty(in.back().sizes(), in.back().options().dtype(torch::kFloat32));
      kernels::Weight w = job(out[i], out[i]);
      w.src = in.back().data_ptr();
      jobs.push_back(w);
    }
    kernels::from_channels_last(jobs, kernel_dtype(type), c10::cuda::getCurrentCUDAStream().stream());
    return out;
  }
};

}  // namespace

std::vector<Tensor> channels_last_weights(const std::vector<Tensor>& weights, torch::ScalarType dtype) {
  return ToChannelsLast::apply(at::TensorList(weights), static_cast<std::int64_t>(dtype));
}

#else

std::vector<Tensor> channels_last_weights(const std::vector<Tensor>& weights, torch::ScalarType dtype) {
  std::vector<Tensor> out;
  out.reserve(weights.size());
  for (const Tensor& w : weights) out.push_back(w.to(dtype).contiguous(at::MemoryFormat::ChannelsLast));
  return out;
}

#endif

}  // namespace tandem
