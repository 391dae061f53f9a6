#include "common/torch/cross_entropy.hpp"

#include <torch/autograd.h>
#include <torch/nn/functional/loss.h>

#ifdef TANDEM_GPU_KERNELS
#include <c10/cuda/CUDAStream.h>

#include "common/torch/cross_entropy_kernels.hpp"
#endif

namespace tandem {

using torch::Tensor;

namespace {

std::pair<Tensor, Tensor> aten_cross_entropy_and_correct(const Tensor& logits, const Tensor& y) {
  Tensor loss = torch::nn::functional::cross_entropy(logits, y);
  torch::NoGradGuard no_grad;
  return {loss, logits.detach().argmax(1).eq(y).sum()};
}

#ifdef TANDEM_GPU_KERNELS

namespace kernels = cross_entropy_kernels;

cuda::StreamHandle stream_of(const Tensor& t) { return c10::cuda::getCurrentCUDAStream(t.device().index()).stream(); }

bool kernels_take(const Tensor& logits, const Tensor& y) {
  return logits.is_cuda() && logits.dim() == 2 && logits.scalar_type() == torch::kFloat32 && logits.is_contiguous() &&
         logits.size(0) >= 1 && logits.size(1) >= 1 && logits.numel() <= kernels::kMaxLogits && y.dim() == 1 &&
         y.size(0) == logits.size(0) && y.scalar_type() == torch::kInt64 && y.device() == logits.device() &&
         y.is_contiguous();
}

struct CrossEntropyOp : torch::autograd::Function<CrossEntropyOp> {
  static torch::autograd::tensor_list forward(torch::autograd::AutogradContext* ctx, const Tensor& logits,
                                              const Tensor& y) {
    Tensor loss = torch::empty({}, logits.options());
    Tensor correct = torch::empty({}, y.options());
    Tensor log_sum_exp = torch::empty({logits.size(0)}, logits.options());
    kernels::cross_entropy_forward({.logits = logits.data_ptr<float>(),
                                    .labels = y.data_ptr<std::int64_t>(),
                                    .n = logits.size(0),
                                    .classes = logits.size(1),
                                    .loss = loss.data_ptr<float>(),
                                    .correct = correct.data_ptr<std::int64_t>(),
                                    .log_sum_exp = log_sum_exp.data_ptr<float>()},
                                   stream_of(logits));
    ctx->save_for_backward({logits, y, log_sum_exp});
    ctx->mark_non_differentiable({correct});
    ctx->set_materialize_grads(false);  // the count's gradient stays undefined, not a launch filling zeros
    return {loss, correct};
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const Tensor &logits = saved[0], &y = saved[1], &log_sum_exp = saved[2];
    if (!grads[0].defined()) return {Tensor(), Tensor()};
    const Tensor dloss = grads[0].to(torch::kFloat32);
    Tensor dlogits = torch::empty_like(logits);
    kernels::cross_entropy_backward({.logits = logits.data_ptr<float>(),
                                     .labels = y.data_ptr<std::int64_t>(),
                                     .log_sum_exp = log_sum_exp.data_ptr<float>(),
                                     .dloss = dloss.data_ptr<float>(),
                                     .n = logits.size(0),
                                     .classes = logits.size(1),
                                     .dlogits = dlogits.data_ptr<float>()},
                                    stream_of(logits));
    return {dlogits, Tensor()};
  }
};

#endif

}  // namespace

std::pair<Tensor, Tensor> cross_entropy_and_correct(const Tensor& logits, const Tensor& y) {
#ifdef TANDEM_GPU_KERNELS
  if (kernels_take(logits, y)) {
    const torch::autograd::tensor_list out = CrossEntropyOp::apply(logits, y);
    return {out[0], out[1]};
  }
#endif
  return aten_cross_entropy_and_correct(logits, y);
}

}  // namespace tandem
