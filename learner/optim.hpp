// Optimizers (SGD with momentum/Nesterov/weight decay, Adam, AdamW) and learning-rate schedules.
//
// Why not torch::optim: its state is keyed by TensorImpl address, differently in LibTorch 1.13 and
// 2.x, which makes saving it portably awkward; and it may drop gradients to undefined in zero_grad,
// which would undo gradients kept as views of one flat buffer. Here the state is a list of named
// tensors with the parameters' shapes, saved and restored by name (state_tensors()), and
// zero_grad() zeroes gradients in place. The update formulas are PyTorch's (torch.optim.SGD with
// dampening 0, torch.optim.Adam/AdamW), which the tests check against.
//
// Parameters: the optimizer keeps the tensors it is given (sharing their TensorImpl) and updates
// them in place, so it must be built after anything that re-homes them (flat parameters, to()).
// When the parameters tile one contiguous buffer in order (flat parameters) and so do their
// gradients, each step is one fused update over the whole buffer (a handful of kernels instead of a
// handful per tensor) with the state held flat too; otherwise it updates tensor by tensor. The
// arithmetic per element is the same either way, so both give bit-identical results.
// State lives on the parameters' device. One thread at a time.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace tandem {

struct OptimizerConfig {
  std::string kind = "sgd";    // sgd | adam | adamw
  double lr = 0.05;            // base learning rate (the schedule scales it)
  double momentum = 0.9;       // sgd
  bool nesterov = true;        // sgd
  double weight_decay = 5e-4;  // sgd, adam: L2 added to the gradient; adamw: decoupled
  double beta1 = 0.9;          // adam, adamw
  double beta2 = 0.999;
  double eps = 1e-8;
  bool fused = true;  // LibTorch's fused kernels where there are some (step_fused); false: step()
};

struct ScheduleConfig {
  std::string kind = "cosine";    // constant | step | cosine
  std::int64_t warmup_steps = 0;  // linear warmup from lr/warmup_steps to lr
  std::int64_t total_steps = 0;   // cosine: the step where lr reaches min_lr (required > warmup)
  std::int64_t step_size = 1000;  // step: multiply by gamma every step_size steps after warmup
  double gamma = 0.1;
  double min_lr = 0.0;  // cosine floor
};

// Checks the kinds and ranges; a bad value is a UserError naming the key ("optimizer.kind").
void validate(const OptimizerConfig& config);
void validate(const ScheduleConfig& config);

// The learning rate for the step with 0-based index `step`.
double scheduled_lr(const ScheduleConfig& schedule, double base_lr, std::int64_t step);

class Optimizer {
 public:
  Optimizer(const std::vector<std::pair<std::string, torch::Tensor>>& params, OptimizerConfig config);

  // One update of every parameter that has a gradient, with learning rate `lr`.
  void step(double lr);
  // A step that can be captured in a CUDA graph (learner/captured_train_step.hpp), which would bake step()'s
  // host-side lr and bias corrections into its kernels. set_step_coefficients(lr) counts the step and
  // writes them into a small device tensor, on the current stream and never waiting; step_captured()
  // reads them there, so one capture serves every step. Call set_step_coefficients outside the
  // graph before each replay. Same per-element formulas as step() (a scalar alpha becomes the same
  // float read from the tensor). CUDA parameters only.
  // A graph that holds several steps (the RL update's epochs) sets `steps` of them at once, and its
  // k-th step reads row k: step_captured(k), k < steps (Adam's bias corrections differ per step).
  void set_step_coefficients(double lr, std::int64_t steps = 1);
  void step_captured(std::int64_t k = 0);
  // The captured step through LibTorch's fused multi-tensor optimizers (_fused_sgd_, _fused_adam_,
  // _fused_adamw_: LibTorch 2.x, CUDA parameters): one or two launches update every parameter instead
  // of a handful per buffer, reading the learning rate and the step count that set_step_coefficients
  // wrote to the device. `grads` are the gradients in parameters() order (undefined: no update of
  // that parameter), e.g. from torch::autograd::grad, so .grad is neither read nor zeroed. Same
  // update formulas as PyTorch's optimizers; rounding differs from step() by float32 reordering.
  static bool fused_available();
  bool fused() const;  // config().fused, fused_available() and the parameters are on a GPU
  void step_fused(const std::vector<torch::Tensor>& grads, std::int64_t k = 0);  // k: as step_captured's
  std::vector<torch::Tensor> parameters() const;  // the tensors this optimizer updates, in order

  void zero_grad();  // in place: gradient tensors (and views of a flat gradient) stay allocated

  std::int64_t steps_taken() const { return steps_; }  // Adam's bias correction counts these
  void set_steps_taken(std::int64_t steps) { steps_ = steps; }
  const OptimizerConfig& config() const { return config_; }
  bool flat() const { return flat_.value.defined(); }  // parameters tile one buffer (fused updates)

  // The state as named tensors ("<param>.momentum_buffer", "<param>.exp_avg", "<param>.exp_avg_sq"),
  // sharing storage with the optimizer: copy_ into them to restore.
  std::vector<std::pair<std::string, torch::Tensor>> state_tensors() const;

 private:
  struct Param {
    std::string name;
    torch::Tensor value;
    torch::Tensor buf1;  // sgd: momentum buffer; adam: exp_avg
    torch::Tensor buf2;  // adam: exp_avg_sq
  };
  void update(Param& p, const torch::Tensor& grad, double lr, double bc1, double bc2) const;
  void update_captured(Param& p, const torch::Tensor& grad, const torch::Tensor& k) const;
  torch::Tensor flat_grad() const;  // the gradients as one tensor, if they tile one buffer in order

  std::vector<Param> params_;
  Param flat_;  // defined when the parameters tile one buffer: params_' state are views of its state
  OptimizerConfig config_;
  std::int64_t steps_ = 0;
  static constexpr std::int64_t kCoefficients = 5;  // per step: see set_step_coefficients
  // float [steps, 5] on the parameters' device. A graph keeps its address: the same `steps` on every
  // call reuses it (a different count makes a new one, which an existing graph would not see).
  torch::Tensor coefficients_;
};

}  // namespace tandem
