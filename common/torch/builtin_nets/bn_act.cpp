#include "common/torch/builtin_nets/bn_act.hpp"

#include <ATen/Functions.h>
#include <torch/autograd.h>

#include <atomic>

#ifdef TANDEM_GPU_KERNELS
#include <c10/cuda/CUDAStream.h>

#include "common/torch/builtin_nets/bn_act_cudnn.hpp"
#include "common/torch/builtin_nets/bn_act_kernels.hpp"
#include "common/torch/builtin_nets/scratch.hpp"
#endif

namespace tandem {
namespace {

using torch::Tensor;

std::atomic<bool> fused_allowed{true};
std::atomic<BnBackend> backend{BnBackend::automatic};
constexpr std::int64_t kCudnnFromChannels = 64;  // BnBackend::automatic's threshold (bn_act.hpp)

// The three ATen ops: the reference, and the path wherever the fused one does not apply.
Tensor unfused(torch::nn::BatchNorm2dImpl& bn, const Tensor& x, const Tensor& residual, bool relu) {
  Tensor h = bn.forward(x);
  if (residual.defined()) h = h + residual;
  return relu ? torch::relu(h) : h;
}

}  // namespace

#ifdef TANDEM_GPU_KERNELS

namespace {

namespace kernels = bn_act_kernels;

bool aligned16(const Tensor& t) { return reinterpret_cast<std::uintptr_t>(t.data_ptr()) % 16 == 0; }

kernels::DType kernel_dtype(const Tensor& t) {
  return t.scalar_type() == torch::kFloat32 ? kernels::DType::f32 : kernels::DType::bf16;
}

std::int64_t rows_of(const Tensor& x) { return x.numel() / x.size(1); }

Tensor workspace_for(const Tensor& x) {
  return scratch_bytes(static_cast<std::int64_t>(kernels::workspace_bytes(kernel_dtype(x), rows_of(x), x.size(1))), x);
}

struct BnAct : torch::autograd::Function<BnAct> {
  // The residual is optional: an undefined tensor may not be a custom function's input.
  static Tensor forward(torch::autograd::AutogradContext* ctx, const Tensor& x, const c10::optional<Tensor>& residual,
                        const Tensor& weight, const Tensor& bias, const Tensor& running_mean, const Tensor& running_var,
                        const Tensor& num_batches_tracked, double momentum, double eps, bool relu) {
    const std::int64_t channels = x.size(1), rows = rows_of(x);
    const kernels::DType dtype = kernel_dtype(x);
    const std::int64_t lanes = dtype == kernels::DType::f32 ? 4 : 8;
    Tensor y = torch::empty_like(x, at::MemoryFormat::ChannelsLast);
    Tensor mask = relu ? torch::empty({rows * channels / lanes}, x.options().dtype(torch::kUInt8)) : Tensor();
    Tensor save_mean = torch::empty({channels}, weight.options());
    Tensor save_invstd = torch::empty({channels}, weight.options());
    Tensor workspace = workspace_for(x);
    kernels::Forward f;
    f.dtype = dtype;
    f.rows = rows;
    f.channels = channels;
    f.x = x.data_ptr();
    f.residual = residual ? residual->data_ptr() : nullptr;
    f.y = y.data_ptr();
    f.mask = relu ? mask.data_ptr<std::uint8_t>() : nullptr;
    f.relu = relu;
    f.weight = weight.data_ptr<float>();
    f.bias = bias.data_ptr<float>();
    f.running_mean = running_mean.data_ptr<float>();
    f.running_var = running_var.data_ptr<float>();
    f.num_batches_tracked = num_batches_tracked.data_ptr<std::int64_t>();
    f.momentum = static_cast<float>(momentum);
    f.eps = static_cast<float>(eps);
    f.save_mean = save_mean.data_ptr<float>();
    f.save_invstd = save_invstd.data_ptr<float>();
    f.workspace = workspace.data_ptr();
    kernels::forward_training(f, c10::cuda::getCurrentCUDAStream().stream());
    ctx->save_for_backward({x, mask, weight, save_mean, save_invstd});
    ctx->saved_data["relu"] = relu;
    ctx->saved_data["residual"] = residual.has_value();
    return y;
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const Tensor &x = saved[0], &mask = saved[1], &weight = saved[2];
    const bool relu = ctx->saved_data["relu"].toBool(), residual = ctx->saved_data["residual"].toBool();
    // The gradient arrives in whatever layout the next op's backward made; the kernels read rows.
    const Tensor dy = grads[0].to(x.scalar_type()).contiguous(at::MemoryFormat::ChannelsLast);
    Tensor dx = torch::empty_like(x, at::MemoryFormat::ChannelsLast);
    Tensor dresidual = residual ? torch::empty_like(x, at::MemoryFormat::ChannelsLast) : Tensor();
    Tensor dweight = torch::empty_like(weight), dbias = torch::empty_like(weight);
    Tensor workspace = workspace_for(x);
    kernels::Backward b;
    b.dtype = kernel_dtype(x);
    b.rows = rows_of(x);
    b.channels = x.size(1);
    b.dy = dy.data_ptr();
    b.x = x.data_ptr();
    b.mask = relu ? mask.data_ptr<std::uint8_t>() : nullptr;
    b.relu = relu;
    b.weight = weight.data_ptr<float>();
    b.save_mean = saved[3].data_ptr<float>();
    b.save_invstd = saved[4].data_ptr<float>();
    b.dx = dx.data_ptr();
    b.dresidual = residual ? dresidual.data_ptr() : nullptr;
    b.dweight = dweight.data_ptr<float>();
    b.dbias = dbias.data_ptr<float>();
    b.workspace = workspace.data_ptr();
    kernels::backward(b, c10::cuda::getCurrentCUDAStream().stream());
    return {dx, dresidual, dweight, dbias, Tensor(), Tensor(), Tensor(), Tensor(), Tensor(), Tensor()};
  }
};

}  // namespace

bool bn_act_is_fused(const torch::nn::BatchNorm2dImpl& bn, const Tensor& x, const Tensor& residual) {
  if (!fused_allowed.load(std::memory_order_relaxed)) return false;
  const auto& o = bn.options;
  if (!bn.is_training() || !o.affine() || !o.track_running_stats() || !o.momentum().has_value()) return false;
  if (!x.is_cuda() || x.dim() != 4 || !x.is_contiguous(at::MemoryFormat::ChannelsLast) || !aligned16(x)) return false;
  if (x.scalar_type() != torch::kFloat32 && x.scalar_type() != torch::kBFloat16) return false;
  if (bn.weight.scalar_type() != torch::kFloat32 || x.numel() / x.size(1) < 2) return false;
  if (!kernels::supported(kernel_dtype(x), x.size(1))) return false;
  if (residual.defined() && (residual.sizes() != x.sizes() || residual.scalar_type() != x.scalar_type() ||
                             !residual.is_contiguous(at::MemoryFormat::ChannelsLast) || !aligned16(residual)))
    return false;
  return true;
}

Tensor bn_act(torch::nn::BatchNorm2dImpl& bn, const Tensor& x, const Tensor& residual, bool relu) {
  if (!bn_act_is_fused(bn, x, residual)) return unfused(bn, x, residual, relu);
  const BnBackend b = backend.load(std::memory_order_relaxed);
  const bool cudnn = b == BnBackend::cudnn || (b == BnBackend::automatic && x.size(1) >= kCudnnFromChannels);
  if (cudnn && cudnn_bn::supported(x, residual.defined(), relu)) return cudnn_bn::bn_act(bn, x, residual, relu);
  return BnAct::apply(x, residual.defined() ? c10::optional<Tensor>(residual) : c10::nullopt, bn.weight, bn.bias,
                      bn.running_mean, bn.running_var, bn.num_batches_tracked, *bn.options.momentum(), bn.options.eps(),
                      relu);
}

#else

bool bn_act_is_fused(const torch::nn::BatchNorm2dImpl&, const Tensor&, const Tensor&) { return false; }

Tensor bn_act(torch::nn::BatchNorm2dImpl& bn, const Tensor& x, const Tensor& residual, bool relu) {
  return unfused(bn, x, residual, relu);
}

#endif

void bn_act_allow_fused(bool allow) { fused_allowed.store(allow, std::memory_order_relaxed); }
void bn_act_set_backend(BnBackend b) { backend.store(b, std::memory_order_relaxed); }

}  // namespace tandem
