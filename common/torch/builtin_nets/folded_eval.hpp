// Evaluation with every BatchNorm folded into the convolution before it (a built-in cnn or resnet18
// on the GPU).
//
//   if (!FoldedEval::unsupported(model.builtin_network(), model.device())) {
//     FoldedEval folded(*model.builtin_network(), torch::kBFloat16);
//     folded.refold();                          // after each new version of the weights
//     torch::Tensor logits = folded.forward(x); // float [B, C, H, W] on the GPU -> float32 logits
//   }
//
// Why: in eval mode a BatchNorm is an affine map per channel, so it folds into the convolution
// before it: w' = w * gamma / sqrt(var + eps), b' = beta - mean * gamma / sqrt(var + eps). Then each
// conv-BN-ReLU, and ResNet's conv-BN-add-ReLU, is one cuDNN call with the bias, the add and the ReLU
// in its epilogue (at::cudnn_convolution_relu / _add_relu): no pass over the activations besides the
// convolutions'. The downsample branch's folded bias joins the bias of the convolution it is added to.
// ResNet's head (average pool + linear) and the cnn's first block are kernels of their own
// (conv_pool.hpp).
// refold() is two launches (weight_prep_kernels.hpp: every weight scaled, cast and made channels-last at
// once, then every bias), small enough to capture and replay once per followed version.
//
// Exactness: the same function as Model::forward in eval mode, computed in another order; float32
// logits agree within a relative L2 of 1e-3 (TF32 convolutions, as eager uses too), bfloat16 within
// 2e-2 of float32 eager (tests/folded_eval_test.cpp).
// Tensors: the folded weights are allocated once, so their addresses stay valid for a CUDA graph;
// refold() rewrites them in place and reads the model's parameters and buffers where they are (a
// follower copies new versions in place). The network must outlive this object.
// Threads: one thread; kernels go on the current CUDA stream.
#pragma once

#include <torch/types.h>

#include <memory>
#include <optional>
#include <string>

#include "common/torch/builtin_nets/networks.hpp"

namespace tandem {

class FoldedEval {
 public:
  // Why `net` (null: not a built-in network) cannot be evaluated folded on `device` (no BatchNorm, not
  // on the GPU, a build without the GPU kernels), or nullopt when it can.
  static std::optional<std::string> unsupported(nets::Net* net, const torch::Device& device);

  FoldedEval(nets::Net& net, torch::ScalarType dtype);  // dtype: float32 or bfloat16; net on the GPU
  ~FoldedEval();
  FoldedEval(const FoldedEval&) = delete;
  FoldedEval& operator=(const FoldedEval&) = delete;

  void refold();
  torch::Tensor forward(const torch::Tensor& x);
  torch::ScalarType dtype() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tandem
