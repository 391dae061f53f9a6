#include "common/torch/builtin_nets/dnnl_linear.hpp"

#include <ATen/Context.h>
#include <ATen/Functions.h>
#include <c10/core/InferenceMode.h>
#include <torch/autograd.h>

namespace tandem {
namespace {

using torch::Tensor;

struct DnnlLinear : torch::autograd::Function<DnnlLinear> {
  static Tensor product(const Tensor& a, const Tensor& b_rows, const c10::optional<Tensor>& bias) {  // a b_rows^T
    return at::mkldnn_linear(a.contiguous().to_mkldnn(), b_rows.contiguous(), bias).to_dense();
  }
  static Tensor forward(torch::autograd::AutogradContext* ctx, const Tensor& x, const Tensor& w, const Tensor& b) {
    ctx->save_for_backward({x, w});
    return product(x, w, b);
  }
  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const Tensor& g = grads[0];
    const Tensor gx = ctx->needs_input_grad(0) ? product(g, saved[1].t(), c10::nullopt) : Tensor();
    return {gx, product(g.t(), saved[0].t(), c10::nullopt), g.sum(0)};
  }
};

}  // namespace

Tensor linear(torch::nn::Linear& l, const Tensor& x) {
  if (!at::hasMKLDNN() || x.dim() != 2 || !x.device().is_cpu() || x.scalar_type() != torch::kFloat32 || x.size(0) == 0)
    return l->forward(x);
  if (!torch::GradMode::is_enabled() || c10::InferenceMode::is_enabled())
    return DnnlLinear::product(x, l->weight, l->bias);
  return DnnlLinear::apply(x, l->weight, l->bias);
}

}  // namespace tandem
