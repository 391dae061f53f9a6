#include "common/torch/builtin_nets/cudnn_conv.hpp"

#include <ATen/Functions.h>
#include <torch/autograd.h>

#include <array>
#include <cstdint>

#if defined(TANDEM_TORCH_CUDA) && defined(TANDEM_HAVE_CUDNN)
#include <ATen/cuda/CUDAEvent.h>
#include <cuda_runtime.h>

#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "common/torch/builtin_nets/cudnn_graph.hpp"
#include "common/torch/builtin_nets/cudnn_handle.hpp"
#include "common/torch/builtin_nets/scratch.hpp"
#define TANDEM_CUDNN_CONV 1
#endif

namespace tandem {

using torch::Tensor;

namespace {
constexpr std::array<std::int64_t, 2> kDilation{1, 1}, kNoOutputPadding{0, 0};
}  // namespace

std::tuple<Tensor, Tensor, Tensor> conv_backward(const Tensor& dy, const Tensor& x, const Tensor& w,
                                                 at::IntArrayRef stride, at::IntArrayRef padding,
                                                 std::array<bool, 3> mask) {
  return at::convolution_backward(dy, x, w, c10::nullopt, stride, padding, kDilation, /*transposed=*/false,
                                  kNoOutputPadding, /*groups=*/1, mask);
}

namespace {

struct ConvSharingInput : torch::autograd::Function<ConvSharingInput> {
  static torch::autograd::tensor_list forward(torch::autograd::AutogradContext* ctx, const Tensor& x, const Tensor& w,
                                              at::IntArrayRef stride, at::IntArrayRef padding) {
    ctx->save_for_backward({x, w});
    ctx->saved_data["stride"] = stride.vec();
    ctx->saved_data["padding"] = padding.vec();
    ctx->set_materialize_grads(false);  // an unused second output brings no gradient, not zeros
    return {at::convolution(x, w, {}, stride, padding, kDilation, false, kNoOutputPadding, 1), x};
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const Tensor &x = saved[0], &w = saved[1], &dy = grads[0], &other = grads[1];
    const std::vector<std::int64_t> stride = ctx->saved_data["stride"].toIntVector();
    const std::vector<std::int64_t> padding = ctx->saved_data["padding"].toIntVector();
    Tensor dx, dw;
    if (!dy.defined()) return {other, Tensor(), Tensor(), Tensor()};
    if (ctx->needs_input_grad(1)) dw = std::get<1>(conv_backward(dy, x, w, stride, padding, {false, true, false}));
    if (ctx->needs_input_grad(0)) {
      // `other` is ours to write when only autograd's hand-over (its list and our copy of it) holds
      // it and nothing else shares its memory.
      const bool ours = other.defined() && other.use_count() <= 2 && other.storage().use_count() == 1;
      if (ours && conv_dgrad_accumulate(dy, w, other, stride, padding)) {
        dx = other;
      } else {
        dx = std::get<0>(conv_backward(dy, x, w, stride, padding, {true, false, false}));
        if (other.defined()) dx.add_(other);
      }
    }
    return {dx, dw, Tensor(), Tensor()};
  }
};

}  // namespace

std::pair<Tensor, Tensor> conv2d_sharing_input(const Tensor& x, const Tensor& w, at::IntArrayRef stride,
                                               at::IntArrayRef padding) {
  const torch::autograd::tensor_list out = ConvSharingInput::apply(x, w, stride, padding);
  return {out[0], out[1]};
}

#ifdef TANDEM_CUDNN_CONV

namespace {

namespace graph = cudnn_graph;

// The largest power of two up to 16 that divides every tensor's address.
std::int64_t alignment_of(std::initializer_list<const Tensor*> tensors) {
  std::uintptr_t bits = 0;
  for (const Tensor* t : tensors) bits |= reinterpret_cast<std::uintptr_t>(t->data_ptr());
  std::int64_t a = 16;
  while (a > 1 && bits % static_cast<std::uintptr_t>(a) != 0) a /= 2;
  return a;
}

std::array<std::int64_t, 4> dims4(const Tensor& t) { return {t.size(0), t.size(1), t.size(2), t.size(3)}; }

struct Entry {
  int device;
  graph::ConvShape shape;
  std::shared_ptr<const graph::Plan> plan;  // null: no engine for this shape
};

std::mutex cache_mutex;
std::vector<Entry> cache;  // a few shapes per model: a list is enough

bool capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  return cudaStreamIsCapturing(stream, &status) == cudaSuccess && status != cudaStreamCaptureStatusNone;
}

// The fastest of the candidates on this GPU, each run on scratch memory (the blend would change dx).
std::shared_ptr<const graph::Plan> fastest(cudnnHandle_t handle, std::vector<graph::Plan> plans, const Tensor& dy,
                                           const Tensor& w, const Tensor& dx) {
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
  if (plans.size() == 1 || capturing(stream)) return std::make_shared<const graph::Plan>(std::move(plans.front()));
  const Tensor scratch = torch::empty_like(dx);
  std::optional<std::size_t> best;
  float best_ms = std::numeric_limits<float>::max();
  for (std::size_t i = 0; i < plans.size(); ++i) {
    const Tensor workspace = scratch_bytes(plans[i].workspace_bytes(), dx);
    const auto run = [&] {
      plans[i].execute(handle, {{graph::kY, dy.data_ptr()}, {graph::kW, w.data_ptr()}, {graph::kX, scratch.data_ptr()}},
                       workspace.data_ptr());
    };
    try {
      run();  // the first run may load or compile the kernel
    } catch (const UserError&) {
      continue;  // a plan that finalized but does not run here
    }
    at::cuda::CUDAEvent start(cudaEventDefault), end(cudaEventDefault);
    start.record();
    for (int r = 0; r < 3; ++r) run();
    end.record();
    end.synchronize();
    const float ms = start.elapsed_time(end);
    if (ms < best_ms) {
      best_ms = ms;
      best = i;
    }
  }
  if (!best) return nullptr;
  return std::make_shared<const graph::Plan>(std::move(plans[*best]));
}

std::shared_ptr<const graph::Plan> plan_for(cudnnHandle_t handle, const graph::ConvShape& shape, const Tensor& dy,
                                            const Tensor& w, const Tensor& dx) {
  const int device = dx.device().index();
  const std::lock_guard<std::mutex> lock(cache_mutex);
  for (const Entry& e : cache)
    if (e.device == device && e.shape == shape) return e.plan;
  std::shared_ptr<const graph::Plan> plan;
  try {
    std::vector<graph::Plan> plans = graph::candidate_plans(handle, graph::conv_dgrad_graph(handle, shape, 1.0f), 8);
    if (!plans.empty()) plan = fastest(handle, std::move(plans), dy, w, dx);
  } catch (const UserError&) {
    plan = nullptr;  // cuDNN takes no such graph: the caller adds
  }
  cache.push_back({device, shape, plan});
  return plan;
}

}  // namespace

bool conv_dgrad_accumulate(const Tensor& dy, const Tensor& w, const Tensor& dx, at::IntArrayRef stride,
                           at::IntArrayRef padding) {
  const auto type = dx.scalar_type();
  if (!dx.is_cuda() || dx.dim() != 4 || (type != torch::kFloat32 && type != torch::kBFloat16)) return false;
  for (const Tensor* t : {&dy, &w, &dx})
    if (t->scalar_type() != type || t->device() != dx.device() || !t->is_contiguous(at::MemoryFormat::ChannelsLast))
      return false;
  if (w.size(1) != dx.size(1) || stride.size() != 2 || padding.size() != 2) return false;
  graph::ConvShape shape;
  shape.type = type == torch::kFloat32 ? CUDNN_DATA_FLOAT : CUDNN_DATA_BFLOAT16;
  shape.x = dims4(dx);
  shape.w = dims4(w);
  shape.y = dims4(dy);
  shape.stride = {stride[0], stride[1]};
  shape.padding = {padding[0], padding[1]};
  shape.alignment = alignment_of({&dy, &w, &dx});
  const cudnnHandle_t handle = cudnn_handle_on_current_stream();
  const std::shared_ptr<const graph::Plan> plan = plan_for(handle, shape, dy, w, dx);
  if (!plan) return false;
  const Tensor workspace = scratch_bytes(plan->workspace_bytes(), dx);
  plan->execute(handle, {{graph::kY, dy.data_ptr()}, {graph::kW, w.data_ptr()}, {graph::kX, dx.data_ptr()}},
                workspace.data_ptr());
  return true;
}

#else

bool conv_dgrad_accumulate(const Tensor&, const Tensor&, const Tensor&, at::IntArrayRef, at::IntArrayRef) {
  return false;
}

#endif

}  // namespace tandem
