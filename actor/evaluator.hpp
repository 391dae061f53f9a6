// Evaluates a model on a split of a dataset cache, reading the samples where they lie in shared
// memory: each batch is a torch::from_blob view of the cache's field "x" (and "y"), converted to a
// normalised float batch on the evaluation device. Nothing but one batch is ever copied.
//
//   shm::DatasetCache cache = shm::DatasetCache::attach("fmnist");
//   Evaluator eval(cache, {.split = "test", .batch_size = 1000, .mean = {0.2860}, .std = {0.3530}});
//   EvalResult r = eval.evaluate(model);   // accuracy, mean loss, samples, seconds
//
// Fields: "x" uint8 (scaled by 1/255 before normalising) or float32, per-sample shape C,H,W;
// "y" int64 (or int32/uint8) scalars. Normalisation: (x - mean[c]) / std[c], with one value or one
// per channel; it must be the learner's (the feeds') normalisation, or the accuracy means nothing.
//
// Lifetime and threads: the Evaluator borrows the cache, which must outlive it and every view it
// returns. Views point into a read-only mapping: writing through one is a segfault by design.
// evaluate() switches the model to eval mode and back, so one thread uses a model at a time.
// With cuda_graph on a GPU, every full batch replays one CUDA graph of its device-side work
// (actor/graph_eval.hpp), bitwise equal to eager; the last partial batch runs eagerly. Where a graph
// cannot be used (a CPU device, a TorchScript model, a refused capture) it evaluates eagerly and logs
// why, once per Evaluator.
// A stop callback, when given, is asked before each batch: a stop request ends an evaluation within
// one batch (the result is then incomplete and must not be reported).
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/torch/models.hpp"
#include "shm/dataset_cache.hpp"

namespace tandem {

class GraphEval;

struct EvalConfig {
  std::string split = "test";
  std::int64_t batch_size = 1000;
  std::vector<double> mean = {0.0};
  std::vector<double> std = {1.0};
  torch::Device device = torch::kCPU;
  std::int64_t max_samples = 0;  // 0: the whole split, else its first max_samples samples
  bool cuda_graph = false;       // replay full batches from a CUDA graph (see above)
};

struct EvalResult {
  std::int64_t samples = 0;
  double accuracy = 0.0;
  double loss = 0.0;     // mean cross-entropy
  double seconds = 0.0;  // wall time of evaluate()
  bool complete = true;  // false: stopped before the last batch; samples counts the ones evaluated
};

class Evaluator {
 public:
  Evaluator(const shm::DatasetCache& cache, EvalConfig config);  // UserError on missing fields or split

  EvalResult evaluate(Model& model, const std::function<bool()>& stop = {}) const;

  std::int64_t num_samples() const { return end_ - begin_; }
  // Zero-copy views of samples [begin, end) of the split (0 = its first sample), as stored.
  torch::Tensor inputs_view(std::int64_t begin, std::int64_t end) const;
  torch::Tensor labels_view(std::int64_t begin, std::int64_t end) const;
  // Whether the last evaluate() replayed a CUDA graph for its full batches.
  bool graph_active() const { return graph_ != nullptr; }
  // A raw input batch -> float on the evaluation device, normalised.
  torch::Tensor normalise(const torch::Tensor& raw) const;

 private:
  EvalConfig config_;
  shm::DatasetCache::Field x_, y_;
  std::int64_t begin_ = 0, end_ = 0;  // the split, in cache samples
  torch::ScalarType x_type_, y_type_;
  std::vector<std::int64_t> sample_shape_;
  torch::Tensor mean_, std_;  // [1, C, 1, 1] or [1], float, on the device

  // The graph for `model`, captured on first use (nullptr: evaluate eagerly, the reason logged once).
  GraphEval* graph_for(Model& model) const;
  mutable std::shared_ptr<GraphEval> graph_;
  mutable torch::Tensor graph_x_, graph_y_;  // the graph's input buffers: one batch, as stored, on the device
  mutable bool graph_refused_ = false;
};

}  // namespace tandem
