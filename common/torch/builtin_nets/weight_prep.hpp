// The convolution weights one GPU forward uses: channels-last, in the step's compute dtype.
//
//   std::vector<torch::Tensor> w = channels_last_weights({conv1->weight, conv2->weight}, torch::kBFloat16);
//   torch::Tensor y = conv1->_conv_forward(x, w[0]);
//
// Why: the activations run channels-last on the GPU (models.hpp) and cuDNN wants the weights in the
// same layout, while the parameters stay float32 [O, I, KH, KW] for the flat buffer, checkpoints and
// the weight slab. ATen converts each weight with a launch of its own in every forward (a cast too
// under bf16) and hands back a channels-last gradient that AccumulateGrad adds, strided, into the
// parameter's: ~60 small launches per ResNet-18 step. Here all weights convert in one launch and all
// gradients come back as float32 in the parameters' layout in one more (weight_prep_kernels.hpp). An
// autograd op: gradients flow to the parameters given.
// Without the GPU kernels (a build without nvcc) each weight converts through ATen instead.
// Threads: the caller's; kernels go on the current CUDA stream.
#pragma once

#include <torch/types.h>

#include <vector>

namespace tandem {

std::vector<torch::Tensor> channels_last_weights(const std::vector<torch::Tensor>& weights, torch::ScalarType dtype);

}  // namespace tandem
