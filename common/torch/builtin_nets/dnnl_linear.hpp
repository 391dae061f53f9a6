// A linear layer's forward (and backward) through oneDNN on the CPU.
//
//   torch::Tensor y = linear(fc, x);   // == fc->forward(x), through oneDNN where it applies
//
// Why: Debian's LibTorch multiplies float matrices with the reference BLAS (BLAS_INFO=generic),
// ~8x slower than oneDNN at the 64x64 layers of an RL policy and ~15x at the cnn's 1568x128 fc1,
// whose forward and backward took 33 of the cnn's 56 ms step at batch 128 (and streamed memory the
// ranks of a node then fought over). Convolutions already go through oneDNN in LibTorch.
// Applies to a 2-D float32 CPU input when LibTorch has oneDNN; anything else runs fc->forward.
// Dense in, dense out; the backward pass is two more oneDNN products. Threads: the caller's.
#pragma once

#include <torch/nn/modules/linear.h>
#include <torch/types.h>

namespace tandem {

torch::Tensor linear(torch::nn::Linear& layer, const torch::Tensor& x);

}  // namespace tandem
