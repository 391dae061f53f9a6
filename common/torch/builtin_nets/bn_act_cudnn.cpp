#include "common/torch/builtin_nets/bn_act_cudnn.hpp"

#include "common/error.hpp"
#include "common/torch/builtin_nets/batch_counts.hpp"

#if defined(TANDEM_TORCH_CUDA) && defined(TANDEM_HAVE_CUDNN)
#include <cudnn.h>
#include <torch/autograd.h>

#include <map>
#include <mutex>
#include <tuple>

#include "common/torch/builtin_nets/cudnn_handle.hpp"
#include "common/torch/builtin_nets/scratch.hpp"
#endif

namespace tandem::cudnn_bn {

#if defined(TANDEM_TORCH_CUDA) && defined(TANDEM_HAVE_CUDNN)

// cuDNN 9 marks the legacy BatchNorm API deprecated; it is the one with the fused ReLU and add.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

namespace {

using torch::Tensor;

void check(cudnnStatus_t status, const char* call) {
  if (status != CUDNN_STATUS_SUCCESS) fail("cuDNN {} failed: {}", call, cudnnGetErrorString(status));
}

// The descriptors one call needs, made and destroyed with it (host work only).
struct Descriptors {
  cudnnTensorDescriptor_t x = nullptr, bn = nullptr;
  cudnnActivationDescriptor_t relu = nullptr;
  cudnnBatchNormOps_t ops = CUDNN_BATCHNORM_OPS_BN;
  static constexpr cudnnBatchNormMode_t kMode = CUDNN_BATCHNORM_SPATIAL_PERSISTENT;

  Descriptors(const Tensor& t, bool residual, bool relu_on) {
    check(cudnnCreateTensorDescriptor(&x), "cudnnCreateTensorDescriptor");
    check(cudnnCreateTensorDescriptor(&bn), "cudnnCreateTensorDescriptor");
    check(cudnnCreateActivationDescriptor(&relu), "cudnnCreateActivationDescriptor");
    const cudnnDataType_t type = t.scalar_type() == torch::kFloat32 ? CUDNN_DATA_FLOAT : CUDNN_DATA_BFLOAT16;
    check(cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NHWC, type, static_cast<int>(t.size(0)),
                                     static_cast<int>(t.size(1)), static_cast<int>(t.size(2)),
                                     static_cast<int>(t.size(3))),
          "cudnnSetTensor4dDescriptor");
    check(cudnnDeriveBNTensorDescriptor(bn, x, kMode), "cudnnDeriveBNTensorDescriptor");
    check(cudnnSetActivationDescriptor(relu, CUDNN_ACTIVATION_RELU, CUDNN_PROPAGATE_NAN, 0.0),
          "cudnnSetActivationDescriptor");
    ops = !relu_on   ? CUDNN_BATCHNORM_OPS_BN
          : residual ? CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION
                     : CUDNN_BATCHNORM_OPS_BN_ACTIVATION;
  }
  ~Descriptors() {
    cudnnDestroyActivationDescriptor(relu);
    cudnnDestroyTensorDescriptor(bn);
    cudnnDestroyTensorDescriptor(x);
  }
  Descriptors(const Descriptors&) = delete;
  Descriptors& operator=(const Descriptors&) = delete;
};

struct CudnnBnAct : torch::autograd::Function<CudnnBnAct> {
  static Tensor forward(torch::autograd::AutogradContext* ctx, const Tensor& x, const c10::optional<Tensor>& residual,
                        const Tensor& weight, const Tensor& bias, const Tensor& running_mean, const Tensor& running_var,
                        const Tensor& num_batches_tracked, double momentum, double eps, bool relu) {
    const Descriptors d(x, residual.has_value(), relu);
    cudnnHandle_t h = cudnn_handle_on_current_stream();
    std::size_t workspace_size = 0, reserve_size = 0;
    check(cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(h, d.kMode, d.ops, d.x, residual ? d.x : nullptr,
                                                                   d.x, d.bn, relu ? d.relu : nullptr, &workspace_size),
          "cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize");
    check(cudnnGetBatchNormalizationTrainingExReserveSpaceSize(h, d.kMode, d.ops, relu ? d.relu : nullptr, d.x,
                                                               &reserve_size),
          "cudnnGetBatchNormalizationTrainingExReserveSpaceSize");
    Tensor y = torch::empty_like(x, at::MemoryFormat::ChannelsLast);
    Tensor save_mean = torch::empty_like(weight), save_invstd = torch::empty_like(weight);
    Tensor workspace = scratch_bytes(static_cast<std::int64_t>(workspace_size), x),
           reserve = scratch_bytes(static_cast<std::int64_t>(reserve_size), x);
    const float one = 1.0f, zero = 0.0f;
    check(cudnnBatchNormalizationForwardTrainingEx(
              h, d.kMode, d.ops, &one, &zero, d.x, x.data_ptr(), residual ? d.x : nullptr,
              residual ? residual->data_ptr() : nullptr, d.x, y.data_ptr(), d.bn, weight.data_ptr(), bias.data_ptr(),
              momentum, running_mean.data_ptr(), running_var.data_ptr(), eps, save_mean.data_ptr(),
              save_invstd.data_ptr(), relu ? d.relu : nullptr, workspace.data_ptr(), workspace_size, reserve.data_ptr(),
              reserve_size),
          "cudnnBatchNormalizationForwardTrainingEx");
    BatchCounts::count(num_batches_tracked);
    ctx->save_for_backward({x, y, weight, bias, save_mean, save_invstd, reserve});
    ctx->saved_data["relu"] = relu;
    ctx->saved_data["residual"] = residual.has_value();
    ctx->saved_data["eps"] = eps;
    return y;
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    const auto s = ctx->get_saved_variables();
    const Tensor &x = s[0], &y = s[1], &weight = s[2], &bias = s[3], &reserve = s[6];
    const bool relu = ctx->saved_data["relu"].toBool(), residual = ctx->saved_data["residual"].toBool();
    const Descriptors d(x, residual, relu);
    cudnnHandle_t h = cudnn_handle_on_current_stream();
    const Tensor dy = grads[0].to(x.scalar_type()).contiguous(at::MemoryFormat::ChannelsLast);
    Tensor dx = torch::empty_like(x, at::MemoryFormat::ChannelsLast);
    Tensor dresidual = residual ? torch::empty_like(x, at::MemoryFormat::ChannelsLast) : Tensor();
    Tensor dweight = torch::empty_like(weight), dbias = torch::empty_like(weight);
    std::size_t workspace_size = 0;
    check(cudnnGetBatchNormalizationBackwardExWorkspaceSize(h, d.kMode, d.ops, d.x, d.x, d.x, residual ? d.x : nullptr,
                                                            d.x, d.bn, relu ? d.relu : nullptr, &workspace_size),
          "cudnnGetBatchNormalizationBackwardExWorkspaceSize");
    Tensor workspace = scratch_bytes(static_cast<std::int64_t>(workspace_size), x);
    const float one = 1.0f, zero = 0.0f;
    check(cudnnBatchNormalizationBackwardEx(
              h, d.kMode, d.ops, &one, &zero, &one, &zero, d.x, x.data_ptr(), d.x, y.data_ptr(), d.x, dy.data_ptr(),
              residual ? d.x : nullptr, residual ? dresidual.data_ptr() : nullptr, d.x, dx.data_ptr(), d.bn,
              weight.data_ptr(), bias.data_ptr(), dweight.data_ptr(), dbias.data_ptr(),
              ctx->saved_data["eps"].toDouble(), s[4].data_ptr(), s[5].data_ptr(), relu ? d.relu : nullptr,
              workspace.data_ptr(), workspace_size, reserve.data_ptr(), reserve.numel()),
          "cudnnBatchNormalizationBackwardEx");
    return {dx, dresidual, dweight, dbias, Tensor(), Tensor(), Tensor(), Tensor(), Tensor(), Tensor()};
  }
};

}  // namespace

bool supported(const Tensor& x, bool residual, bool relu) {
  if (residual && !relu) return false;
  // Ask cuDNN once per (dtype, channels, ops): whether it has a kernel for them.
  static std::mutex mutex;
  static std::map<std::tuple<int, std::int64_t, bool, bool>, bool> answers;
  const auto key = std::make_tuple(static_cast<int>(x.scalar_type()), x.size(1), residual, relu);
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = answers.find(key); it != answers.end()) return it->second;
  const Descriptors d(x, residual, relu);
  std::size_t size = 0;
  const bool ok = cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(
                      at::native::getCudnnHandle(), d.kMode, d.ops, d.x, residual ? d.x : nullptr, d.x, d.bn,
                      relu ? d.relu : nullptr, &size) == CUDNN_STATUS_SUCCESS;
  return answers[key] = ok;
}

Tensor bn_act(torch::nn::BatchNorm2dImpl& bn, const Tensor& x, const Tensor& residual, bool relu) {
  return CudnnBnAct::apply(x, residual.defined() ? c10::optional<Tensor>(residual) : c10::nullopt, bn.weight, bn.bias,
                           bn.running_mean, bn.running_var, bn.num_batches_tracked, *bn.options.momentum(),
                           bn.options.eps(), relu);
}

#else

bool supported(const torch::Tensor&, bool, bool) { return false; }
torch::Tensor bn_act(torch::nn::BatchNorm2dImpl&, const torch::Tensor&, const torch::Tensor&, bool) {
  fail("cuDNN's fused BatchNorm is not in this build (it needs python3's torch with CUDA and its cuDNN)");
}

#endif

}  // namespace tandem::cudnn_bn
