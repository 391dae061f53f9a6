#include "learner/captured_train_step.hpp"

#include <torch/torch.h>

#include "common/error.hpp"
#include "common/log.hpp"
#include "common/torch/cross_entropy.hpp"
#include "learner/ddp/grad_sync.hpp"

#include "learner/graph_capture.hpp"

#ifdef TANDEM_TORCH_CUDA
#include <c10/cuda/CUDAGuard.h>
#endif

namespace tandem {

std::optional<std::string> CapturedTrainStep::unsupported(Trainer& trainer, const ddp::GradSync* sync) {
  Model& model = trainer.model();
  if (!model.nn_module())
    return "a TorchScript model is not captured (its forward may branch on the data, which a graph would freeze)";
  if (auto why = GraphCapture::unsupported(model.device())) return why;
  if (sync && !sync->capturable())
    return "this gradient sync's collectives cannot be recorded into a graph (only NCCL's can)";
  if (trainer.has_before_update() && !sync)
    return "the trainer runs host code before each update, which a graph would not replay";
  return std::nullopt;
}

#ifdef TANDEM_TORCH_CUDA

struct CapturedTrainStep::Impl {
  Trainer& trainer;
  Gather gather;
  c10::DeviceIndex device;
  feed::Batch fixed;            // x float [batch, ...], y int64 [batch]: the graph's inputs
  torch::Tensor rows_;          // int64 [batch]: the gather's indices
  torch::Tensor loss, correct;  // the graph's outputs
  // d loss / d loss, made once in the first eager warm-up step: autograd would otherwise fill a new
  // one inside the graph on every replay.
  torch::Tensor one;
  std::optional<GraphCapture> graph;
  bool fallen_back = false;
  ddp::GradSync* sync;  // data-parallel: its all-reduces are part of the step

  Impl(Trainer& t, const std::vector<std::int64_t>& shape, Gather g, int warmup, ddp::GradSync* s)
      : trainer(t), gather(std::move(g)), sync(s) {
    if (auto why = unsupported(t, sync)) fail("a captured training step is not possible here: {}", *why);
    if (shape.empty() || shape[0] < 1) fail("a captured training step needs a batch shape with at least one sample");
    const torch::Device d = t.model().device();
    device = d.index();
    c10::cuda::CUDAGuard guard(device);
    fixed.x = torch::zeros(shape, torch::TensorOptions().dtype(torch::kFloat).device(d));
    fixed.y = torch::zeros({shape[0]}, torch::TensorOptions().dtype(torch::kInt64).device(d));
    rows_ = torch::zeros({shape[0]}, torch::TensorOptions().dtype(torch::kInt64).device(d));
    (void)t.window_sums(d);  // made now, outside the graph's memory pool, which adds to them
    graph.emplace(d, warmup);
    // The sync's accumulators live on the stream its hooks are made on: the graph's side stream.
    if (sync) graph->on_side_stream([&] { sync->rehook(); });
  }

  // One step's device work; eager during warm-up, recorded during capture. With the fused optimizers
  // the gradients come from autograd::grad straight into the update: no accumulation into .grad, no
  // zeroing, one or two launches for the whole update.
  void body() {
    if (gather) gather(rows_, fixed);
    torch::Tensor logits = trainer.model().forward(fixed.x);
    const auto [l, step_correct] = cross_entropy_and_correct(logits, fixed.y);
    if (!one.defined() || one.scalar_type() != l.scalar_type()) one = torch::ones_like(l);
    Optimizer& opt = trainer.mutable_optimizer();
    if (sync) {  // the gradients go through the sync's flat buffer: its hooks start the all-reduces
      l.backward(one);
      sync->finish_on_device(trainer.step());
      if (opt.fused()) {
        std::vector<torch::Tensor> grads;
        for (const torch::Tensor& p : opt.parameters()) grads.push_back(p.grad());
        opt.step_fused(grads);
      } else {
        opt.step_captured();
      }
      sync->grad_buffer().zero_();  // every gradient (and the vote) in one launch
    } else if (opt.fused()) {
      opt.step_fused(torch::autograd::grad({l}, opt.parameters(), {one}, /*retain_graph=*/false, /*create_graph=*/false,
                                           /*allow_unused=*/true));
    } else {
      l.backward(one);
      opt.step_captured();
      opt.zero_grad();
    }
    trainer.add_to_window(l, step_correct, fixed.y.size(0));
    loss = l.detach();
    correct = step_correct;
  }

  StepMetrics run() {
    c10::cuda::CUDAGuard guard(device);
    if (fallen_back) return eager();
    const double lr = trainer.current_lr();
    Optimizer& opt = trainer.mutable_optimizer();
    const std::int64_t before = opt.steps_taken();
    opt.set_step_coefficients(lr);
    if (graph->run([&] { body(); }) == GraphCapture::Ran::refused) {
      // Its collectives' bookkeeping (and NCCL's) is mid-step: no eager retry.
      if (sync)
        fail(
            "learner.cuda_graph: capturing the data-parallel training step failed at step {} ({}): set "
            "learner.cuda_graph = false to train these ranks eagerly",
            trainer.step(), graph->why_refused());
      log::warn("learner.cuda_graph: capturing the training step failed ({}); training eagerly from step {}",
                graph->why_refused(), trainer.step());
      opt.set_steps_taken(before);  // the refused step is taken again, eagerly
      fallen_back = true;
      return eager();
    }
    if (sync) sync->after_replay();  // after a warm-up step too: its vote is read the same way
    trainer.count_step(fixed.y.size(0), lr);
    return {.step = trainer.step(), .lr = lr, .samples = fixed.y.size(0), .loss = loss, .correct = correct};
  }

  StepMetrics eager() {
    if (gather) gather(rows_, fixed);
    return trainer.train_step(fixed.x, fixed.y);
  }
};

CapturedTrainStep::CapturedTrainStep(Trainer& trainer, const std::vector<std::int64_t>& batch_shape, Gather gather,
                                     int warmup_steps, ddp::GradSync* sync)
    : impl_(std::make_unique<Impl>(trainer, batch_shape, std::move(gather), warmup_steps, sync)) {}
CapturedTrainStep::~CapturedTrainStep() = default;

const torch::Tensor& CapturedTrainStep::rows() { return impl_->rows_; }
StepMetrics CapturedTrainStep::step() { return impl_->run(); }
StepMetrics CapturedTrainStep::step(const torch::Tensor& x, const torch::Tensor& y) {
  if (x.sizes() != impl_->fixed.x.sizes() || y.sizes() != impl_->fixed.y.sizes())
    fail("a captured training step takes batches of {} samples, got {}: use drop_last", impl_->fixed.y.size(0),
         y.size(0));
  c10::cuda::CUDAGuard guard(impl_->device);
  impl_->fixed.x.copy_(x, /*non_blocking=*/true);
  impl_->fixed.y.copy_(y, /*non_blocking=*/true);
  return impl_->run();
}
bool CapturedTrainStep::captured() const { return impl_->graph->captured() && !impl_->fallen_back; }
bool CapturedTrainStep::eager() const { return impl_->fallen_back; }

#else

struct CapturedTrainStep::Impl {};

// NOLINTNEXTLINE(performance-unnecessary-value-param): a sink parameter, which the CUDA build's constructor keeps
CapturedTrainStep::CapturedTrainStep(Trainer&, const std::vector<std::int64_t>&, Gather, int, ddp::GradSync*) {
  fail("a captured training step (learner.cuda_graph) needs a CUDA build: this build's LibTorch has no CUDA");
}
CapturedTrainStep::~CapturedTrainStep() = default;
const torch::Tensor& CapturedTrainStep::rows() { fail("CapturedTrainStep needs a CUDA build"); }
StepMetrics CapturedTrainStep::step() { fail("CapturedTrainStep needs a CUDA build"); }
StepMetrics CapturedTrainStep::step(const torch::Tensor&, const torch::Tensor&) {
  fail("CapturedTrainStep needs a CUDA build");
}
bool CapturedTrainStep::captured() const { return false; }
bool CapturedTrainStep::eager() const { return true; }

#endif

}  // namespace tandem
