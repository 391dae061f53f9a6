// BatchNorm2d, an optional residual add, an optional ReLU: one op, fused on the GPU.
//
//   torch::Tensor y = bn_act(*bn, conv->forward(x));                 // relu(bn(x))
//   torch::Tensor z = bn_act(*bn2, conv2->forward(h), shortcut);      // relu(bn2(.) + shortcut)
//   torch::Tensor s = bn_act(*ds_bn, ds_conv->forward(x), {}, false); // bn(.) alone
//
// Why: ATen runs BatchNorm, the add and ReLU as separate kernels (and their backwards too, plus an
// add for a gradient that two branches share and an increment of num_batches_tracked): on a ResNet-18
// step at batch 128 that is ~180 elementwise launches and several extra passes over every
// activation. Fused (bn_act_kernels.hpp): forward reads x once for the statistics and once more for
// y = relu(x * scale + shift + residual), writing y and a one-byte-per-16-bytes ReLU mask; backward
// reads dy, x and the mask twice and writes dx (and the residual's gradient) once. Four launches per
// BatchNorm in all, each deterministic.
//
// Fused when: a CUDA build with the kernels, training mode, an affine BatchNorm with running
// statistics and a momentum, x a channels-last contiguous float32 or bfloat16 CUDA tensor with more
// than one value per channel and channels a multiple of 4 (float32) or 8 (bfloat16), residual of the
// same shape, type and layout. Otherwise the ATen ops run: the same function everywhere. Training:
// batch statistics, the running ones and num_batches_tracked updated as nn::BatchNorm2d does
// (biased variance to normalise, unbiased into running_var). Values match the ATen ops to rounding.
// BatchNorm's parameters stay float32 when x is bfloat16 (as under torch.autocast).
// Threads: the caller's; kernels go on the current CUDA stream, nothing waits for the device.
#pragma once

#include <torch/nn/modules/batchnorm.h>
#include <torch/types.h>

#include "common/torch/builtin_nets/batch_counts.hpp"  // what a step around bn_act calls apply() on

namespace tandem {

torch::Tensor bn_act(torch::nn::BatchNorm2dImpl& bn, const torch::Tensor& x, const torch::Tensor& residual = {},
                     bool relu = true);

// Whether bn_act(bn, x, residual) takes the fused path.
bool bn_act_is_fused(const torch::nn::BatchNorm2dImpl& bn, const torch::Tensor& x, const torch::Tensor& residual = {});

// For tests and benchmarks that compare with ATen: false makes bn_act run the ATen ops everywhere,
// true (the default) lets it fuse again. Not to be called while another thread runs bn_act.
void bn_act_allow_fused(bool allow);

// Which fused kernels run: Tandem's (bn_act_kernels.hpp) or cuDNN's (bn_act_cudnn.hpp, where this
// build has it and cuDNN takes the shape; else Tandem's). `automatic`, the default, is what measured
// faster on an H200 (docs/results/HISTORY.md, "BatchNorm backends"): cuDNN's persistent kernels from
// 64 channels up (ResNet-18), Tandem's below (the cnn's 16 and 32
// channels). `tandem-bench graph --bn-backend` measures each.
enum class BnBackend { automatic, tandem, cudnn };
void bn_act_set_backend(BnBackend backend);

}  // namespace tandem
