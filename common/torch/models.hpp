// The model registry: every network the learner trains and the actors run, behind one interface.
//
//   Model m = Model::create({.name = "cnn", .channels = 1, .height = 28, .width = 28, .num_classes = 10});
//   torch::Tensor logits = m.forward(x);          // x: float [B, C, H, W] -> logits [B, num_classes]
//
// Built-in names (builtin_model_names()):
//   mlp               flatten -> 256 -> 256 -> classes, ReLU
//   cnn               a small BatchNorm CNN for 28x28 (any H, W divisible by 4): 3x3 conv blocks of 16
//                     and 32 channels with 2x2 max-pool, then a 128-unit hidden layer; Fashion-MNIST
//                     0.91 after two epochs (docs/results/HISTORY.md, "Fashion-MNIST recipe"). On the
//                     CPU each BatchNorm-ReLU-pool is one fused op (fused_bn_relu_pool.hpp)
//   resnet18          ResNet-18, CIFAR variant for 32x32: 3x3 stride-1 stem, no max-pool
//   actor_critic_mlp  flatten -> 64 -> 64 (tanh) trunks for a policy head (classes = actions) and a
//                     value head; forward() gives the policy logits, forward_heads() {logits, value[B]};
//                     a Gaussian policy's log-std is a parameter, observations optionally normalised
//                     by running statistics (ModelSpec::gaussian_dims, norm_obs; networks.cpp)
// On the GPU the built-in networks run channels-last with BatchNorm, its residual add and ReLU
// fused (networks.hpp says how). Any other name is a path to a TorchScript file (torch::jit::save / torch.jit.save) whose forward
// takes [B, C, H, W] and returns logits (or a tuple whose first element is the logits).
// create() runs a two-sample dry forward and checks the output shape, so a model that does not fit
// the data is a one-line UserError naming the model, not a crash mid-training.
//
// Parameters and buffers: named_parameters()/named_buffers() return the module's own tensors (same
// TensorImpl, not copies), in a fixed order (registration order, depth first). Flat parameters
// (common/torch/flat_params) re-home them in place into one buffer (Tensor::set_), which every
// holder of these tensors sees; anything that keeps tensors (the optimizer) is built after that.
// to(device) also moves them in place.
//
// Threads: a Model is used by one thread at a time (LibTorch's intra-op threads aside).
#pragma once

#include <torch/nn/module.h>
#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/torch/model_spec.hpp"

namespace torch::jit {
struct Module;
}

namespace tandem {

namespace nets {
struct Net;
}

using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

const std::vector<std::string>& builtin_model_names();

class Model {
 public:
  // Builds a built-in model or loads a TorchScript file (on the CPU, training mode).
  static Model create(const ModelSpec& spec);

  Model(Model&&) noexcept;
  Model& operator=(Model&&) noexcept;
  ~Model();

  torch::Tensor forward(const torch::Tensor& x);                     // logits [B, num_classes]
  std::vector<torch::Tensor> forward_heads(const torch::Tensor& x);  // {logits, more heads...}

  NamedTensors named_parameters() const;
  NamedTensors named_buffers() const;
  std::vector<torch::Tensor> parameters() const;
  std::vector<torch::Tensor> trainable_parameters() const;  // requires_grad, in registration order
  std::int64_t num_parameters() const;                      // elements

  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const;
  void to(const torch::Device& device);
  torch::Device device() const;

  // The dtype of a GPU forward's activations and matmuls: float32 (the default) or bfloat16, with
  // float32 parameters, BatchNorm statistics and logits, as torch.autocast does it (a TorchScript
  // model runs under ATen's autocast itself). CPU forwards stay float32.
  void set_precision(torch::ScalarType compute);
  torch::ScalarType precision() const;

  // An AOTInductor package (.pt2) as this model's evaluation forward on the GPU (aoti_package.hpp):
  // the model keeps its parameters and buffers (what a weight slab or checkpoint holds), which the
  // package takes in at weights_changed(). Loaded now if the model is on a GPU, else at to(cuda).
  // Evaluation only: a forward in training mode is a UserError.
  void set_package(const std::string& path);
  bool has_package() const;
  // Call after the parameters or buffers were overwritten in place (a follower's new version): a
  // model with a package swaps them into its constants; anything else ignores it.
  void weights_changed();

  // The underlying module, for code that must reach it (flat parameters, TorchScript export):
  // exactly one of them is non-null.
  torch::nn::Module* nn_module() const;
  torch::jit::Module* jit_module() const;
  // The built-in network behind this model (builtin_nets/networks.hpp), or null for a TorchScript one.
  nets::Net* builtin_network() const;

  const ModelSpec& spec() const;
  std::string describe() const;  // "cnn (1x28x28 -> 10, 421642 parameters)"

 private:
  struct Impl;
  explicit Model(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tandem
