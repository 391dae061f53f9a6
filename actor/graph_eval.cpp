#include "actor/graph_eval.hpp"

#include <torch/torch.h>

#include "common/error.hpp"
#include "common/torch/builtin_nets/folded_eval.hpp"

#ifdef TANDEM_TORCH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace tandem {

std::optional<std::string> GraphEval::unsupported(const Model& model) {
  if (!model.nn_module())
    return "a TorchScript model is not captured (its forward may branch on the data, which a graph would freeze)";
  if (!model.device().is_cuda()) return "the actor evaluates on the CPU (CUDA graphs need actor.device = \"cuda\")";
  if (model.has_package()) return "an AOTInductor package runs its own compiled forward";
#ifndef TANDEM_TORCH_CUDA
  return "this build's LibTorch has no CUDA";
#endif
  return std::nullopt;
}

#ifdef TANDEM_TORCH_CUDA

namespace {

// The first parameter's address: a model whose parameters moved is not the one captured.
const void* first_parameter(const Model& model) {
  const std::vector<torch::Tensor> p = model.parameters();
  return p.empty() ? nullptr : p.front().data_ptr();
}

// Captures fn's kernels into `graph` on a side stream ordered after the caller's stream (and the
// caller's after it): one eager run first (cuDNN/cuBLAS handles, cuDNN's algorithm search), then the
// capture. Capturing runs no kernel.
template <class Fn>
void capture(at::cuda::CUDAGraph& graph, c10::DeviceIndex device, Fn&& fn) {
  const c10::cuda::CUDAStream caller = c10::cuda::getCurrentCUDAStream(device);
  const c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool(false, device);
  at::cuda::CUDAEvent before, after;
  before.record(caller);
  before.block(side);
  {
    c10::cuda::CUDAStreamGuard on_side(side);
    fn();
    // Thread-local: other threads of the process keep their CUDA calls during the capture.
    graph.capture_begin({0, 0}, cudaStreamCaptureModeThreadLocal);
    try {
      fn();
    } catch (...) {
      try {
        graph.capture_end();  // ends the capture and the allocator's routing to the graph's pool
      } catch (...) {
      }
      (void)cudaGetLastError();
      throw;
    }
    graph.capture_end();
  }
  after.record(side);
  after.block(caller);
}

}  // namespace

struct GraphEval::Impl {
  Model& model;
  const void* captured_parameter;
  torch::ScalarType precision;
  torch::Tensor raw_x, raw_y;
  std::function<torch::Tensor(const torch::Tensor&)> normalise;
  std::unique_ptr<FoldedEval> folded;  // null: the model's own forward
  torch::Tensor loss, correct;         // the graph's outputs
  at::cuda::CUDAGraph fold_graph, graph;

  torch::Tensor logits(const torch::Tensor& x) { return folded ? folded->forward(x) : model.forward(x); }

  // Evaluator::evaluate's per-batch work, from the batch on the device on.
  void body() {
    torch::NoGradGuard no_grad;
    const torch::Tensor x = normalise(raw_x);
    const torch::Tensor y = raw_y.to(torch::kInt64);
    const torch::Tensor out = logits(x);
    loss = torch::nn::functional::cross_entropy(
        out, y, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum));
    correct = out.argmax(1).eq(y).sum();
  }

  Impl(Model& m, torch::Tensor x, torch::Tensor y, std::function<torch::Tensor(const torch::Tensor&)> n)
      : model(m),
        captured_parameter(first_parameter(m)),
        precision(m.precision()),
        raw_x(std::move(x)),
        raw_y(std::move(y)),
        normalise(std::move(n)) {
    if (auto why = unsupported(m)) fail("a captured evaluation is not possible here: {}", *why);
    const c10::DeviceIndex device = raw_x.device().index();
    c10::cuda::CUDAGuard guard(device);
    // A model that runs an AOTInductor package evaluates through it, never folded.
    if (!m.has_package() && !FoldedEval::unsupported(m.builtin_network(), m.device())) {
      folded = std::make_unique<FoldedEval>(*m.builtin_network(), m.precision());
      capture(fold_graph, device, [&] { folded->refold(); });
    }
    capture(graph, device, [&] { body(); });  // evaluation changes no state: the warm-up run is harmless
  }
};

GraphEval::GraphEval(Model& model, torch::Tensor raw_x, torch::Tensor raw_y,
                     std::function<torch::Tensor(const torch::Tensor&)> normalise)
    : impl_(std::make_unique<Impl>(model, std::move(raw_x), std::move(raw_y), std::move(normalise))) {}
GraphEval::~GraphEval() = default;

void GraphEval::refold() {
  if (!impl_->folded) return;
  c10::cuda::CUDAGuard guard(impl_->raw_x.device().index());
  impl_->fold_graph.replay();
}

std::pair<torch::Tensor, torch::Tensor> GraphEval::replay() {
  c10::cuda::CUDAGuard guard(impl_->raw_x.device().index());
  impl_->graph.replay();
  return {impl_->loss, impl_->correct};
}

torch::Tensor GraphEval::logits(const torch::Tensor& x) {
  torch::NoGradGuard no_grad;
  return impl_->logits(x);
}

bool GraphEval::folded() const { return impl_->folded != nullptr; }

bool GraphEval::matches(const Model& model) const {
  return &model == &impl_->model && first_parameter(model) == impl_->captured_parameter && !model.is_training() &&
         model.precision() == impl_->precision;
}

#else

struct GraphEval::Impl {};
// NOLINTNEXTLINE(performance-unnecessary-value-param): sink parameters, which the CUDA build's constructor keeps
GraphEval::GraphEval(Model&, torch::Tensor, torch::Tensor, std::function<torch::Tensor(const torch::Tensor&)>) {
  fail("a captured evaluation (actor.cuda_graph) needs a CUDA build: this build's LibTorch has no CUDA");
}
GraphEval::~GraphEval() = default;
void GraphEval::refold() { fail("GraphEval needs a CUDA build"); }
std::pair<torch::Tensor, torch::Tensor> GraphEval::replay() { fail("GraphEval needs a CUDA build"); }
torch::Tensor GraphEval::logits(const torch::Tensor&) { fail("GraphEval needs a CUDA build"); }
bool GraphEval::folded() const { return false; }
bool GraphEval::matches(const Model&) const { return false; }

#endif

}  // namespace tandem
