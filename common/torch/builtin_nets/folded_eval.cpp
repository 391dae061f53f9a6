#include "common/torch/builtin_nets/folded_eval.hpp"

#include <ATen/Functions.h>
#include <torch/csrc/api/include/torch/utils.h>

#include "common/error.hpp"
#include "common/torch/builtin_nets/networks.hpp"

#ifdef TANDEM_GPU_KERNELS
#include <c10/cuda/CUDAStream.h>

#include "common/torch/builtin_nets/weight_prep_kernels.hpp"
#endif

namespace tandem {
std::optional<std::string> FoldedEval::unsupported(nets::Net* net, const torch::Device& device) {
  if (net == nullptr) return "only the built-in networks' BatchNorms are known to fold (a TorchScript model's are not)";
  if (net->fold_pairs().empty()) return "the network has no BatchNorm to fold";
  if (!device.is_cuda()) return "folding runs on the GPU only";
#ifndef TANDEM_GPU_KERNELS
  return "this build has no GPU kernels (LibTorch without CUDA, or no nvcc)";
#endif
  return std::nullopt;
}

struct FoldedEval::Impl {
  nets::Net* net;
  std::vector<nets::FoldPair> pairs;
  nets::Folded folded;
};

FoldedEval::FoldedEval(nets::Net& net, torch::ScalarType dtype) : impl_(std::make_unique<Impl>()) {
  const auto params = net.parameters();
  const torch::Device device = params.empty() ? torch::Device(torch::kCPU) : params.front().device();
  if (auto why = unsupported(&net, device)) fail("a folded evaluation is not possible here: {}", *why);
  if (dtype != torch::kFloat32 && dtype != torch::kBFloat16)
    fail("a folded evaluation runs in float32 or bfloat16, not {}", c10::toString(dtype));
  impl_->net = &net;
  impl_->pairs = impl_->net->fold_pairs();
  impl_->folded.dtype = dtype;
  for (const nets::FoldPair& p : impl_->pairs) {
    const torch::Tensor& w = p.conv->weight;
    impl_->folded.weight.push_back(
        torch::empty(w.sizes(), w.options().dtype(dtype).memory_format(at::MemoryFormat::ChannelsLast)));
    impl_->folded.bias.push_back(p.bias ? torch::empty({w.size(0)}, w.options().dtype(dtype)) : torch::Tensor());
  }
}

FoldedEval::~FoldedEval() = default;

torch::ScalarType FoldedEval::dtype() const { return impl_->folded.dtype; }

torch::Tensor FoldedEval::forward(const torch::Tensor& x) {
  torch::NoGradGuard no_grad;
  return impl_->net->folded_logits(x, impl_->folded);
}

#ifdef TANDEM_GPU_KERNELS

namespace {

weight_prep_kernels::BatchNormRef ref(const nets::FoldPair& p) {
  auto& bn = *p.bn;
  return {bn.weight.data_ptr<float>(), bn.bias.data_ptr<float>(), bn.running_mean.data_ptr<float>(),
          bn.running_var.data_ptr<float>(), static_cast<float>(bn.options.eps())};
}

}  // namespace

void FoldedEval::refold() {
  const auto dtype = impl_->folded.dtype == torch::kFloat32 ? weight_prep_kernels::DType::f32
                                                            : weight_prep_kernels::DType::bf16;
  std::vector<weight_prep_kernels::Weight> weights;
  std::vector<weight_prep_kernels::Bias> biases;
  for (std::size_t i = 0; i < impl_->pairs.size(); ++i) {
    const nets::FoldPair& p = impl_->pairs[i];
    const torch::Tensor& w = p.conv->weight;
    if (!w.is_contiguous() || w.scalar_type() != torch::kFloat32)
      fail("a folded evaluation needs float32 contiguous convolution weights");
    weights.push_back({.src = w.data_ptr(),
                       .dst = impl_->folded.weight[i].data_ptr(),
                       .out_channels = w.size(0),
                       .in_channels = w.size(1),
                       .kernel_area = w.size(2) * w.size(3),
                       .fold = ref(p)});
    if (p.bias) {
      weight_prep_kernels::Bias b{.dst = impl_->folded.bias[i].data_ptr(), .channels = w.size(0), .first = ref(p)};
      if (p.add_bias_of >= 0) b.second = ref(impl_->pairs[static_cast<std::size_t>(p.add_bias_of)]);
      biases.push_back(b);
    }
  }
  const auto stream = c10::cuda::getCurrentCUDAStream().stream();
  weight_prep_kernels::to_channels_last(weights, dtype, stream);
  weight_prep_kernels::fold_biases(biases, dtype, stream);
}

#else

void FoldedEval::refold() { fail("a folded evaluation needs the GPU kernels"); }

#endif

}  // namespace tandem
