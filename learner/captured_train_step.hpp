// CapturedTrainStep: the supervised training step captured once in a CUDA graph and replayed every step.
//
//   if (auto why = CapturedTrainStep::unsupported(trainer)) log::info("... eager: {}", *why);
//   CapturedTrainStep g(trainer, {batch, 3, 32, 32}, [&](auto& rows, auto& out) { feed.gather(rows, out); });
//   feed.next_rows(g.rows()); g.step();        // DeviceFeed: the gather is part of the graph
//   CapturedTrainStep h(trainer, {batch, 3, 32, 32}); h.step(b.x, b.y);   // any batch: copied in first
//
// What the graph holds: the gather from the fixed index buffer rows() into the fixed batch (when a
// gather is given), forward, cross-entropy, backward, the optimizer update, and the additions to the
// trainer's window sums. The update is LibTorch's fused optimizer where there is one (LibTorch 2.x:
// Optimizer::step_fused over the gradients autograd::grad returns), else Optimizer::step_captured
// and zero-grad; both read the learning rate (and Adam's step) from a device tensor. What runs outside it, before each replay: the optimizer's coefficients
// (Optimizer::set_step_coefficients: the schedule keeps working), the caller's rows copy or the
// batch copy, and the host-side step count. Nothing in a step reads the device back.
//
// Warm-up, capture and replay are GraphCapture's (learner/graph_capture.hpp): the first `warmup_steps` steps
// run eagerly on a side stream, the next is captured there and replayed on the caller's stream, as is
// every later one. A capture that throws has changed no weight: that step and all later ones then run
// eagerly through Trainer::train_step, after one log line saying why.
// BatchNorm's running statistics update in place, which a graph replays faithfully.
//
// Data-parallel ranks (a GradSync over NCCL, `sync`): backward accumulates into the sync's flat
// gradients, whose autograd hooks launch the buckets' all-reduces; those, GradSync::finish_on_device
// and the update over the gradients are recorded too, and after each replay GradSync::after_replay
// reads the stop vote and watches the replay's collectives. Every rank captures the same step (the
// same warm-up), so their graphs issue the same collectives in the same order.
//
// Tensors: the model's parameters, gradients and buffers must keep their addresses (flat parameters
// do); step()'s StepMetrics loss/correct are the graph's outputs, overwritten by the next step.
// Threads: the one thread that drives the trainer, always with the same current stream. In a build
// whose LibTorch has no CUDA, unsupported() says so and the constructor throws a UserError.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "learner/feed/batch.hpp"
#include "learner/trainer.hpp"

namespace tandem::ddp {
class GradSync;
}

namespace tandem {

class CapturedTrainStep {
 public:
  // Fills `out` (the fixed batch) from `rows` (the fixed index buffer) with capturable kernels only.
  using Gather = std::function<void(const torch::Tensor& rows, feed::Batch& out)>;

  // Why this trainer's step cannot be captured (a CPU model, a TorchScript model, a gradient sync
  // other than `sync` over NCCL, a build without CUDA), or nullopt when it can be tried.
  static std::optional<std::string> unsupported(Trainer& trainer, const ddp::GradSync* sync = nullptr);

  // batch_shape: [batch, sample shape...] of the inputs every step has (full batches only).
  CapturedTrainStep(Trainer& trainer, const std::vector<std::int64_t>& batch_shape, Gather gather = {},
                    int warmup_steps = 3, ddp::GradSync* sync = nullptr);
  ~CapturedTrainStep();
  CapturedTrainStep(const CapturedTrainStep&) = delete;
  CapturedTrainStep& operator=(const CapturedTrainStep&) = delete;

  const torch::Tensor& rows();  // int64 [batch] on the model's GPU: where the gather reads its rows
  StepMetrics step();           // with a gather: the rows are in rows()
  StepMetrics step(const torch::Tensor& x, const torch::Tensor& y);  // copied into the fixed batch first

  bool captured() const;  // the graph exists and replays
  bool eager() const;     // capture failed: every step runs eagerly

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tandem
