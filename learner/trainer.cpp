#include "learner/trainer.hpp"

#include <fmt/ranges.h>
#include <torch/types.h>
#include <torch/utils.h>

#include <algorithm>
#include <filesystem>

#include "common/clock.hpp"
#include "common/error.hpp"
#include "common/torch/cross_entropy.hpp"
#include "common/torch/safetensors.hpp"

namespace tandem {
namespace {

constexpr const char* kFormat = "tandem-checkpoint-1";

std::int64_t parse_count(const safetensors::Contents& c, const char* key) {
  const std::string& text = c.meta(key);
  std::size_t used = 0;
  std::int64_t value = -1;
  try {
    value = std::stoll(text, &used);
  } catch (const std::exception&) {
  }
  if (used != text.size() || value < 0)
    fail("{} has metadata {}='{}', not a count: the file is corrupt", c.path, key, text);
  return value;
}

// Checks that the file holds `name` with the shape and dtype of `into`, before anything is copied.
const torch::Tensor& matching(const safetensors::Contents& c, const std::string& name, const torch::Tensor& into) {
  const torch::Tensor& t = c.at(name);
  if (t.sizes() != into.sizes() || t.scalar_type() != into.scalar_type())
    fail("{} holds '{}' as {} [{}], this model has {} [{}]: resume with the model that wrote it", c.path, name,
         c10::toString(t.scalar_type()), fmt::join(t.sizes(), "x"), c10::toString(into.scalar_type()),
         fmt::join(into.sizes(), "x"));
  return t;
}

}  // namespace

Trainer::Trainer(Model& model, TrainerConfig config)
    : model_(model),
      config_(std::move(config)),
      optimizer_((validate(config_.schedule), model.named_parameters()), config_.optimizer) {
  model_.train(true);
  reset_window();
}

double Trainer::current_lr() const { return scheduled_lr(config_.schedule, config_.optimizer.lr, step_); }

StepMetrics Trainer::train_step(const torch::Tensor& x, const torch::Tensor& y) {
  const double lr = current_lr();
  torch::Tensor logits = model_.forward(x);
  const auto [loss, correct] = cross_entropy_and_correct(logits, y);
  loss.backward();
  if (before_update_) before_update_();
  if (optimizer_.fused()) {  // the kernels a captured step uses (captured_train_step.hpp): the two agree exactly
    optimizer_.set_step_coefficients(lr);
    std::vector<torch::Tensor> grads;
    for (const torch::Tensor& p : optimizer_.parameters()) grads.push_back(p.grad());
    optimizer_.step_fused(grads);
  } else {
    optimizer_.step(lr);
  }
  optimizer_.zero_grad();
  add_to_window(loss, correct, x.size(0));
  count_step(x.size(0), lr);
  return {.step = step_, .lr = lr, .samples = x.size(0), .loss = loss.detach(), .correct = correct};
}

void Trainer::add_to_window(const torch::Tensor& loss, const torch::Tensor& correct, std::int64_t samples) {
  torch::NoGradGuard no_grad;
  window_sums(loss.device());
  window_loss_.add_(loss.detach(), /*alpha=*/static_cast<double>(samples));  // one launch, in float64
  window_correct_.add_(correct);
}

std::pair<torch::Tensor, torch::Tensor> Trainer::window_sums(const torch::Device& device) {
  if (!window_loss_.defined() || window_loss_.device() != device) {
    window_loss_ = torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat64).device(device));
    window_correct_ = torch::zeros({}, torch::TensorOptions().dtype(torch::kInt64).device(device));
  }
  return {window_loss_, window_correct_};
}

void Trainer::count_step(std::int64_t samples, double lr) {
  ++step_;
  ++window_steps_;
  window_samples_ += samples;
  window_lr_ = lr;
}

WindowMetrics Trainer::take_window() {
  WindowMetrics w;
  w.step = step_;
  w.steps = window_steps_;
  w.samples = window_samples_;
  w.lr = window_lr_;
  if (window_samples_ > 0) {
    w.loss = window_loss_.item<double>() / static_cast<double>(window_samples_);  // the sync
    w.accuracy = static_cast<double>(window_correct_.item<std::int64_t>()) / static_cast<double>(window_samples_);
  }
  w.seconds = seconds_since(window_start_);
  if (w.steps > 0 && w.seconds > 0.0) w.samples_per_s = static_cast<double>(w.samples) / w.seconds;
  reset_window();
  return w;
}

void Trainer::reset_window() {
  if (window_loss_.defined()) {
    window_loss_.zero_();
    window_correct_.zero_();
  }
  window_steps_ = 0;
  window_samples_ = 0;
  window_start_ = std::chrono::steady_clock::now();
}

void Trainer::save_checkpoint(const std::string& path, const std::map<std::string, std::string>& extra) const {
  safetensors::NamedTensors tensors;
  for (auto& [name, t] : model_.named_parameters()) tensors.emplace_back("model." + name, t);
  for (auto& [name, t] : model_.named_buffers()) tensors.emplace_back("model." + name, t);
  for (auto& [name, t] : optimizer_.state_tensors()) tensors.emplace_back("optim." + name, t);
  safetensors::Metadata meta(extra.begin(), extra.end());
  meta["format"] = kFormat;
  meta["step"] = std::to_string(step_);
  meta["optimizer"] = config_.optimizer.kind;
  meta["optimizer_steps"] = std::to_string(optimizer_.steps_taken());
  meta["model"] = model_.spec().name;
  safetensors::save_file(path, tensors, meta);
}

std::map<std::string, std::string> Trainer::load_checkpoint(const std::string& path) {
  const safetensors::Contents c = safetensors::load_file(path);
  if (c.meta("format") != kFormat)
    fail("{} is a '{}' file, not a {}: point resume at a Tandem checkpoint", path, c.meta("format"), kFormat);
  if (c.meta("optimizer") != config_.optimizer.kind)
    fail("{} holds {} optimizer state, this run uses {}: resume with the same optimizer or start afresh", path,
         c.meta("optimizer"), config_.optimizer.kind);
  const std::int64_t step = parse_count(c, "step");
  const std::int64_t optimizer_steps = parse_count(c, "optimizer_steps");

  // Check everything first, so a mismatched file leaves the model as it was.
  std::vector<std::pair<torch::Tensor, const torch::Tensor*>> copies;
  for (auto& [name, t] : model_.named_parameters()) copies.emplace_back(t, &matching(c, "model." + name, t));
  for (auto& [name, t] : model_.named_buffers()) copies.emplace_back(t, &matching(c, "model." + name, t));
  for (auto& [name, t] : optimizer_.state_tensors()) copies.emplace_back(t, &matching(c, "optim." + name, t));
  {
    torch::NoGradGuard no_grad;
    for (auto& [into, from] : copies) into.copy_(*from);
  }
  step_ = step;
  optimizer_.set_steps_taken(optimizer_steps);
  reset_window();
  return c.metadata;
}

void Trainer::restore_counters(std::int64_t step, std::int64_t optimizer_steps) {
  step_ = step;
  optimizer_.set_steps_taken(optimizer_steps);
  reset_window();
}

std::string checkpoint_path(const std::string& dir, std::int64_t step) {
  return fmt::format("{}/ckpt-{:012d}.safetensors", dir, step);
}

void prune_checkpoints(const std::string& dir, std::int64_t keep) {
  std::vector<std::filesystem::path> all;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const auto name = e.path().filename().string();
    if (name.starts_with("ckpt-") && name.ends_with(".safetensors")) all.push_back(e.path());
  }
  std::sort(all.begin(), all.end());  // equal-width step numbers: name order is step order
  for (std::size_t i = 0; i + static_cast<std::size_t>(keep) < all.size(); ++i) std::filesystem::remove(all[i]);
}

std::optional<std::string> latest_checkpoint(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return std::nullopt;
  std::optional<std::string> best;
  std::string best_name;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    const std::string prefix = "ckpt-", suffix = ".safetensors";
    if (name.size() <= prefix.size() + suffix.size() || name.rfind(prefix, 0) != 0 ||
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
      continue;
    const std::string digits = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
    if (!std::all_of(digits.begin(), digits.end(), [](char ch) { return ch >= '0' && ch <= '9'; })) continue;
    // Equal-width zero-padded numbers: comparing (length, text) compares steps.
    if (!best || std::make_pair(name.size(), name) > std::make_pair(best_name.size(), best_name)) {
      best_name = name;
      best = entry.path().string();
    }
  }
  return best;
}

}  // namespace tandem
