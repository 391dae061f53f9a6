// The built-in networks behind Model (models.hpp says what each is). Internal to common/torch/:
// Model, the folded evaluation (folded_eval.hpp) and their tests include this; nothing else does.
//
// On the GPU every network runs its activations channels-last in `compute_dtype` (float32, or
// bfloat16 for learner.precision = "bf16": activations and matmuls in bf16, BatchNorm statistics and
// every parameter float32, the logits returned float32, as torch.autocast does). The input is
// converted once, the convolution weights once per forward for all layers (weight_prep.hpp), each
// BatchNorm runs fused with its ReLU and residual add (bn_act.hpp). On the CPU the cnn keeps its
// channels-last fused BatchNorm-ReLU-pool (fused_bn_relu_pool.hpp) and linear layers are LibTorch's
// (the system BLAS: OpenBLAS, tools/dev/setup); compute_dtype is ignored there.
// Threads: a network is used by one thread at a time.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/conv.h>
#include <torch/types.h>

#include <memory>
#include <vector>

namespace tandem {

struct ModelSpec;

namespace nets {

// A convolution whose BatchNorm an evaluation may fold into it (folded_eval.hpp).
struct FoldPair {
  torch::nn::Conv2d conv;
  torch::nn::BatchNorm2d bn;
  int add_bias_of = -1;  // also add that pair's folded bias here: two branches summed before one ReLU
  bool bias = true;      // false: this pair's folded bias is added by the pair that names it
};

// Folded weights in fold_pairs() order: channels-last, in `dtype`; bias undefined where
// FoldPair::bias is false.
struct Folded {
  std::vector<torch::Tensor> weight, bias;
  torch::ScalarType dtype = torch::kFloat32;
};

struct Net : torch::nn::Module {
  // {logits, further heads...}
  virtual std::vector<torch::Tensor> heads(const torch::Tensor& x) = 0;
  // Empty where the network has no BatchNorm to fold; else every BatchNorm, after its convolution.
  virtual std::vector<FoldPair> fold_pairs() { return {}; }
  // Evaluation logits (float32) from folded weights; called only where fold_pairs() is non-empty.
  virtual torch::Tensor folded_logits(const torch::Tensor& x, const Folded& folded);

  torch::ScalarType compute_dtype = torch::kFloat32;
};

// The built-in network `spec.name`, or nullptr when the name is not built in.
std::shared_ptr<Net> make_builtin(const ModelSpec& spec);

}  // namespace nets
}  // namespace tandem
