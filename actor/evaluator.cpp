#include "actor/evaluator.hpp"

#include <fmt/ranges.h>
#include <torch/nn/functional/loss.h>
#include <torch/types.h>
#include <torch/utils.h>

#include <chrono>
#include <optional>

#include "actor/graph_eval.hpp"
#include "common/clock.hpp"
#include "common/error.hpp"
#include "common/log.hpp"

namespace tandem {
namespace {

// The cache dtypes the evaluator reads; anything else is refused by the constructor.
std::optional<torch::ScalarType> torch_type(shm::DType t) {
  switch (t) {
    case shm::DType::u8: return torch::kUInt8;
    case shm::DType::i32: return torch::kInt32;
    case shm::DType::i64: return torch::kInt64;
    case shm::DType::f32: return torch::kFloat32;
    default: return std::nullopt;
  }
}

// Puts the model back in the mode it had, also when a forward throws.
struct RestoreMode {
  Model& model;
  bool training;
  ~RestoreMode() { model.train(training); }
};

torch::Tensor stats(const std::vector<double>& v, const char* what, std::size_t channels, const torch::Device& device) {
  if (v.size() != 1 && v.size() != channels)
    fail("normalisation {} has {} values for {} channels: give one value or one per channel", what, v.size(), channels);
  torch::Tensor t = torch::tensor(std::vector<float>(v.begin(), v.end()));
  return (v.size() == 1 ? t : t.view({1, static_cast<std::int64_t>(channels), 1, 1})).to(device);
}

}  // namespace

Evaluator::Evaluator(const shm::DatasetCache& cache, EvalConfig config) : config_(std::move(config)) {
  const std::string name(cache.descriptor().name, strnlen(cache.descriptor().name, sizeof cache.descriptor().name));
  x_ = cache.field("x");
  y_ = cache.field("y");
  const shm::SplitSpec split = cache.split(config_.split);
  begin_ = static_cast<std::int64_t>(split.begin);
  end_ = static_cast<std::int64_t>(split.end);
  if (config_.max_samples > 0) end_ = std::min(end_, begin_ + config_.max_samples);
  if (end_ <= begin_)
    fail("split '{}' of dataset cache '{}' is empty: preload a dataset with a test split", config_.split, name);
  if (config_.batch_size < 1) fail("evaluation batch size {} must be at least 1", config_.batch_size);

  const auto xt = torch_type(x_.dtype), yt = torch_type(y_.dtype);
  x_type_ = xt.value_or(torch::kFloat64);
  y_type_ = yt.value_or(torch::kFloat64);
  if (!xt || (x_type_ != torch::kUInt8 && x_type_ != torch::kFloat32))
    fail("dataset cache '{}' stores x as {}: the evaluator reads uint8 or float32 inputs", name,
         shm::dtype_name(x_.dtype));
  if (!yt || y_type_ == torch::kFloat32 || !y_.sample_shape.empty())
    fail(
        "dataset cache '{}' stores y as {} with {} dimensions: the evaluator reads integer class labels, one per sample",
        name, shm::dtype_name(y_.dtype), y_.sample_shape.size());
  for (std::uint64_t d : x_.sample_shape) sample_shape_.push_back(static_cast<std::int64_t>(d));
  const std::size_t channels = sample_shape_.size() == 3 ? static_cast<std::size_t>(sample_shape_[0]) : 1;
  mean_ = stats(config_.mean, "mean", channels, config_.device);
  std_ = stats(config_.std, "std", channels, config_.device);
}

torch::Tensor Evaluator::inputs_view(std::int64_t begin, std::int64_t end) const {
  std::vector<std::int64_t> shape{end - begin};
  shape.insert(shape.end(), sample_shape_.begin(), sample_shape_.end());
  // const_cast: the mapping is PROT_READ; these views are only ever read (see the header).
  void* data = const_cast<std::byte*>(x_.data + static_cast<std::uint64_t>(begin_ + begin) * x_.stride);
  return torch::from_blob(data, shape, torch::TensorOptions().dtype(x_type_));
}

torch::Tensor Evaluator::labels_view(std::int64_t begin, std::int64_t end) const {
  void* data = const_cast<std::byte*>(y_.data + static_cast<std::uint64_t>(begin_ + begin) * y_.stride);
  return torch::from_blob(data, {end - begin}, torch::TensorOptions().dtype(y_type_));
}

namespace {

// Moves the compact batch first (a no-op for a batch already there), converts on the device.
torch::Tensor normalise_on(const torch::Tensor& raw, const torch::Device& device, const torch::Tensor& mean,
                           const torch::Tensor& std) {
  torch::Tensor x = raw.to(device).to(torch::kFloat32);
  if (raw.scalar_type() == torch::kUInt8) x = x.mul_(1.0 / 255.0);
  return x.sub_(mean).div_(std);
}

}  // namespace

torch::Tensor Evaluator::normalise(const torch::Tensor& raw) const {
  return normalise_on(raw, config_.device, mean_, std_);
}

GraphEval* Evaluator::graph_for(Model& model) const {
  if (!config_.cuda_graph || graph_refused_ || num_samples() < config_.batch_size) return nullptr;
  if (graph_ && graph_->matches(model)) return graph_.get();
  graph_.reset();
  if (auto why = GraphEval::unsupported(model)) {
    log::info("actor.cuda_graph = true, evaluating eagerly: {}", *why);
    graph_refused_ = true;
    return nullptr;
  }
  std::vector<std::int64_t> shape{config_.batch_size};
  shape.insert(shape.end(), sample_shape_.begin(), sample_shape_.end());
  // Zeros, not empty: the warm-up and the capture run the body on these before any batch is copied in,
  // and label garbage is a device-side assert in cross_entropy that poisons the whole CUDA context.
  graph_x_ = torch::zeros(shape, torch::TensorOptions().dtype(x_type_).device(config_.device));
  graph_y_ = torch::zeros({config_.batch_size}, torch::TensorOptions().dtype(y_type_).device(config_.device));
  // By value: the graph outlives no Evaluator state but these tensors.
  auto normalise = [device = config_.device, mean = mean_, std = std_](const torch::Tensor& raw) {
    return normalise_on(raw, device, mean, std);
  };
  try {
    graph_ = std::make_shared<GraphEval>(model, graph_x_, graph_y_, normalise);
  } catch (const std::exception& e) {
    log::warn("actor.cuda_graph: capturing the evaluation failed ({}); evaluating eagerly", first_line(e));
    graph_refused_ = true;
  }
  return graph_.get();
}

EvalResult Evaluator::evaluate(Model& model, const std::function<bool()>& stop) const {
  if (sample_shape_.size() == 3) {
    const ModelSpec& s = model.spec();
    if (sample_shape_ != std::vector<std::int64_t>{s.channels, s.height, s.width})
      fail("model '{}' takes {}x{}x{} inputs, the dataset's samples are {}: build the model for this dataset", s.name,
           s.channels, s.height, s.width, fmt::join(sample_shape_, "x"));
  }
  const auto start = std::chrono::steady_clock::now();
  RestoreMode restore{model, model.is_training()};
  model.eval();
  torch::NoGradGuard no_grad;
  torch::Tensor loss_sum = torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat64).device(config_.device));
  torch::Tensor correct = torch::zeros({}, torch::TensorOptions().dtype(torch::kInt64).device(config_.device));
  const std::int64_t n = num_samples();
  model.weights_changed();  // a compiled package takes this version's weights in
  GraphEval* graph = graph_for(model);
  if (graph != nullptr) graph->refold();  // this version's weights into the folded ones
  EvalResult r;
  for (std::int64_t b = 0; b < n; b += config_.batch_size) {
    if (stop && stop()) {
      r.complete = false;
      break;
    }
    const std::int64_t e = std::min(n, b + config_.batch_size);
    r.samples = e;
    if (e - b == config_.batch_size && graph != nullptr) {  // same kernels as below, one launch
      graph_x_.copy_(inputs_view(b, e), /*non_blocking=*/true);
      graph_y_.copy_(labels_view(b, e), /*non_blocking=*/true);
      auto [batch_loss, batch_correct] = graph->replay();
      loss_sum.add_(batch_loss);
      correct.add_(batch_correct);
      continue;
    }
    torch::Tensor x = normalise(inputs_view(b, e));
    torch::Tensor y = labels_view(b, e).to(config_.device).to(torch::kInt64);
    torch::Tensor logits = graph != nullptr ? graph->logits(x) : model.forward(x);
    loss_sum.add_(torch::nn::functional::cross_entropy(
        logits, y, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum)));
    correct.add_(logits.argmax(1).eq(y).sum());
  }
  const double evaluated = static_cast<double>(std::max<std::int64_t>(r.samples, 1));
  r.loss = loss_sum.item<double>() / evaluated;
  r.accuracy = static_cast<double>(correct.item<std::int64_t>()) / evaluated;
  r.seconds = seconds_since(start);
  return r;
}

}  // namespace tandem
