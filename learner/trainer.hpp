// The supervised training loop's step and its checkpoints.
//
//   Trainer trainer(model, config);              // after flat parameters re-homed the model's tensors
//   StepMetrics m = trainer.train_step(x, y);    // x float [B, C, H, W], y int64 [B], on the model's device
//   if (m.step % 100 == 0) WindowMetrics w = trainer.take_window();   // one device sync
//   trainer.save_checkpoint(checkpoint_path(dir, trainer.step()), {{"version", "12"}});
//
// train_step: forward, cross-entropy, backward, one optimizer update with the scheduled learning
// rate (LibTorch's fused kernels on a GPU, as a captured step: Optimizer::fused), zero the gradients. It never synchronises with the device: loss and correct-count come back
// as device tensors (reading them is the caller's sync), and the window accumulates on the device.
//
// Checkpoints are safetensors files (common/torch/safetensors.hpp) holding
//   model.<name>                  every parameter and buffer (Python: strip "model." for a state dict)
//   optim.<name>.<state>          optimizer state (momentum_buffer, or exp_avg and exp_avg_sq)
//   __metadata__                  format, step, optimizer, optimizer_steps, model, plus the caller's
//                                 keys (version, config, ...)
// and are written atomically. load_checkpoint() copies into the existing tensors (copy_, so flat
// parameters keep their storage) and restores the step: training continues exactly where it was.
//
// Threads: one thread drives a Trainer. The model must not be used elsewhere during train_step.
#pragma once

#include <torch/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <string>

#include "common/torch/models.hpp"
#include "learner/optim.hpp"

namespace tandem {

struct TrainerConfig {
  OptimizerConfig optimizer;
  ScheduleConfig schedule;
};

struct StepMetrics {
  std::int64_t step = 0;     // steps completed, this one included
  double lr = 0.0;           // the learning rate this step used
  std::int64_t samples = 0;  // batch size
  torch::Tensor loss;        // 0-dim, on the device, detached: mean cross-entropy of the batch
  torch::Tensor correct;     // 0-dim int64, on the device: how many predictions were right
};

// Averages since the previous take_window() (or construction / checkpoint load). A window without
// steps measured nothing: its loss, accuracy and samples/s are NaN (so the learner's final record,
// taken after the last step was reported, is no throughput of 0).
struct WindowMetrics {
  std::int64_t step = 0;
  std::int64_t steps = 0;
  std::int64_t samples = 0;
  double loss = std::numeric_limits<double>::quiet_NaN();  // mean over samples
  double accuracy = std::numeric_limits<double>::quiet_NaN();
  double lr = 0.0;       // of the last step
  double seconds = 0.0;  // wall time of the window
  double samples_per_s = std::numeric_limits<double>::quiet_NaN();
};

class Trainer {
 public:
  // Builds the optimizer over model.named_parameters() now (see optim.hpp: after re-homing).
  Trainer(Model& model, TrainerConfig config);

  StepMetrics train_step(const torch::Tensor& x, const torch::Tensor& y);
  // Called between backward and the optimizer update (data-parallel gradient sync: learner/ddp).
  void set_before_update(std::function<void()> fn) { before_update_ = std::move(fn); }
  WindowMetrics take_window();

  // For a step that runs outside train_step, captured in a CUDA graph (learner/captured_train_step.hpp):
  // the window's device sums (loss * batch, float64; correct, int64), which keep their addresses
  // (take_window zeroes them in place) so a graph may add to them; and the host-side bookkeeping of
  // one such step (step count, window samples, lr).
  std::pair<torch::Tensor, torch::Tensor> window_sums(const torch::Device& device);
  void count_step(std::int64_t samples, double lr);
  // One step's loss (its batch's mean) and correct count added to the window's device sums: kernels
  // only, so a captured step records them too.
  void add_to_window(const torch::Tensor& loss, const torch::Tensor& correct, std::int64_t samples);
  bool has_before_update() const { return static_cast<bool>(before_update_); }
  Optimizer& mutable_optimizer() { return optimizer_; }

  std::int64_t step() const { return step_; }
  double current_lr() const;  // for the next step
  const TrainerConfig& config() const { return config_; }
  Model& model() { return model_; }
  const Optimizer& optimizer() const { return optimizer_; }

  // `extra` keys are stored in __metadata__ beside Tandem's own (which they may not replace).
  void save_checkpoint(const std::string& path, const std::map<std::string, std::string>& extra = {}) const;
  // Restores weights, buffers, optimizer state and step; returns the file's metadata. A file from
  // another model or optimizer, or a corrupt one, is a UserError naming the file.
  std::map<std::string, std::string> load_checkpoint(const std::string& path);
  // What a checkpoint restores besides tensors: for a data-parallel rank that receives rank 0's
  // tensors by broadcast because its node has no copy of rank 0's checkpoint file.
  void restore_counters(std::int64_t step, std::int64_t optimizer_steps);

 private:
  void reset_window();

  Model& model_;
  TrainerConfig config_;
  Optimizer optimizer_;
  std::int64_t step_ = 0;
  std::function<void()> before_update_;

  torch::Tensor window_loss_;     // sum of loss * batch, on the device
  torch::Tensor window_correct_;  // on the device
  std::int64_t window_steps_ = 0;
  std::int64_t window_samples_ = 0;
  double window_lr_ = 0.0;
  std::chrono::steady_clock::time_point window_start_;
};

// "<dir>/ckpt-000000001200.safetensors": names sort in step order.
std::string checkpoint_path(const std::string& dir, std::int64_t step);
// The checkpoint with the highest step in `dir`, if any (ignores temporaries and other files).
std::optional<std::string> latest_checkpoint(const std::string& dir);
// Deletes all but the newest `keep` checkpoints in `dir`.
void prune_checkpoints(const std::string& dir, std::int64_t keep);

}  // namespace tandem
