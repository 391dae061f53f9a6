// Pooling layers on the GPU, fused with their neighbours through conv_pool_kernels.hpp (which says
// why): a folded evaluation's conv-ReLU-max-pool blocks of the built-in cnn (or any network's first
// conv3x3 block), and ResNet-18's head, the average pool and the linear layer, in training too.
//
//   torch::Tensor h = conv3x3_relu_pool2(x, folded.weight[0], folded.bias[0]).value_or(fallback);
//   h = max_pool2(folded_conv(conv2, h, ...));
//   torch::Tensor logits = pool_linear(h, fc->weight, fc->bias).value_or(fallback);
//
// Exactness: float32 accumulation of the same products as cuDNN's float32 convolution, in another
// order (no TF32), so within rounding of eager; the max-pool is exact. pool_linear sums in float32
// in another order than ATen's pool and GEMM: within rounding of them.
// Threads: the caller's; kernels go on the current CUDA stream of the input's device.
#pragma once

#include <torch/types.h>

#include <optional>

namespace tandem {

// conv3x3 (padding 1, stride 1) + bias + ReLU + 2x2 max-pool of a float32 [N, C, H, W] GPU input in
// any layout, with a channels-last weight [O, C, 3, 3] and a bias [O] of one dtype (float32 or
// bfloat16): a channels-last [N, O, H/2, W/2] of that dtype. nullopt where the kernel does not take
// these (a build without GPU kernels, other sizes or dtypes): the caller composes ATen's ops then.
std::optional<torch::Tensor> conv3x3_relu_pool2(const torch::Tensor& x, const torch::Tensor& weight,
                                                const torch::Tensor& bias);

// A 2x2 max-pool (stride 2): the vectorised kernel for a channels-last GPU tensor of float32 or
// bfloat16 with a multiple of 8 channels and an even height and width, else torch::max_pool2d.
torch::Tensor max_pool2(const torch::Tensor& x);

// linear(adaptive_avg_pool2d(x, 1).flatten(1), weight, bias) as float32 logits [N, classes], for a
// channels-last float32 or bfloat16 GPU activation x [N, C, H, W] and float32 weight [classes, C]
// and bias [classes] (or none). An autograd op: x's gradient comes back channels-last in x's dtype,
// the weight's and bias's in float32 (with bf16 activations the head multiplies in float32, where
// torch.autocast would use bf16). nullopt where the kernel does not take these (a build without
// GPU kernels, other dtypes or layouts, over 8192 channels).
std::optional<torch::Tensor> pool_linear(const torch::Tensor& x, const torch::Tensor& weight,
                                         const torch::Tensor& bias);

}  // namespace tandem
