// GraphEval: the evaluator's work on one full batch, captured in a CUDA graph (actor.cuda_graph).
//
//   GraphEval g(model, raw_x, raw_y, normalise);      // raw_x/raw_y: fixed device buffers of one batch
//   raw_x.copy_(inputs); raw_y.copy_(labels);          // each full batch, outside the graph
//   auto [loss, correct] = g.replay();                 // 0-dim device tensors, overwritten by the next replay
//
// The graph holds what Evaluator::evaluate does to a batch once it is on the device: the conversion
// to float and normalisation, the forward, the batch's summed cross-entropy and its correct count.
// The caller adds those to its running sums outside the graph, in batch order, as the eager loop does.
// Where the model allows (a built-in cnn or resnet18: folded_eval.hpp) the forward is the folded
// one, each BatchNorm inside its convolution, in the model's precision; the fold itself is a second,
// small graph that refold() replays, once per weight version (the caller calls it after the weights
// changed, before the batches). Folded logits match eager ones within folded_eval.hpp's tolerance;
// for any other model the graph runs the model's own forward, bitwise the eager result.
// Built on the current stream's device; one eager run on a side stream warms cuDNN/cuBLAS up, the
// capture happens on that side stream, replays on the caller's current stream. Capturing runs no
// kernel. The model must stay in eval mode with its parameters at the same addresses (a follower
// copies new versions in place); matches() tells whether a model is the one captured.
// Threads: one thread. In a build whose LibTorch has no CUDA the constructor throws a UserError.
#pragma once

#include <torch/types.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "common/torch/models.hpp"

namespace tandem {

class GraphEval {
 public:
  // Why this model's evaluation cannot be captured, or nullopt when it can be tried.
  static std::optional<std::string> unsupported(const Model& model);

  // Captures now; a capture CUDA refuses is a std::exception (the caller evaluates eagerly).
  GraphEval(Model& model, torch::Tensor raw_x, torch::Tensor raw_y,
            std::function<torch::Tensor(const torch::Tensor&)> normalise);
  ~GraphEval();
  GraphEval(const GraphEval&) = delete;
  GraphEval& operator=(const GraphEval&) = delete;

  void refold();  // after the model's weights changed; nothing for a model that is not folded
  std::pair<torch::Tensor, torch::Tensor> replay();  // (loss sum float32, correct int64) of the batch
  torch::Tensor logits(const torch::Tensor& x);      // eagerly, through the graph's forward (a partial batch)
  bool folded() const;
  bool matches(const Model& model) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tandem
