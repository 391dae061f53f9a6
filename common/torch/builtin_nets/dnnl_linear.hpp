// A linear layer's forward (and backward) through oneDNN on the CPU.
//
//   torch::Tensor y = linear(fc, x);   // == fc->forward(x), through oneDNN where it applies
//
// Why: Debian's LibTorch multiplies float matrices with the reference BLAS (BLAS_INFO=generic),
// several times slower than oneDNN at the 64x64 layers of an RL policy and at the cnn's 1568x128 fc1,
// whose forward and backward took most of the cnn's step (docs/results/HISTORY.md; and streamed memory the
// ranks of a node then fought over). Convolutions already go through oneDNN in LibTorch.
// Applies to a 2-D float32 CPU input when LibTorch has oneDNN; anything else runs fc->forward.
// Dense in, dense out; the backward pass is two more oneDNN products. Threads: the caller's.
#pragma once

#include <torch/nn/modules/linear.h>
#include <torch/types.h>

namespace tandem {

torch::Tensor linear(torch::nn::Linear& layer, const torch::Tensor& x);

}  // namespace tandem
