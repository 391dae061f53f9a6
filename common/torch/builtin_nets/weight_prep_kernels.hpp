// CUDA kernels that convert many convolution weights at once (weight_prep.hpp is the LibTorch-facing
// side). Torch-free, built by nvcc where LibTorch has CUDA (TANDEM_GPU_KERNELS).
//
// A GPU step wants its convolution weights channels-last ([O, KH, KW, I] in memory) and, in bf16
// mode, in bfloat16, while the parameters stay float32 [O, I, KH, KW] (the flat buffer, checkpoints
// and the weight slab keep their bytes). ATen would convert each weight with its own launch (and
// back again for each gradient); these kernels convert every weight of a model in one launch:
//   to_channels_last:   parameters -> the forward's weights, optionally scaled per output channel
//                       by a BatchNorm's gamma / sqrt(var + eps) (folding it for evaluation);
//   from_channels_last: the weights' gradients -> float32 gradients in the parameters' layout.
// fold_biases writes each folded BatchNorm's bias, beta - mean * gamma / sqrt(var + eps), plus a
// second BatchNorm's where two branches meet in one add (ResNet's downsample).
// Each call enqueues on `stream` and never synchronises.
#pragma once

#include <cstdint>
#include <vector>

#include "common/cuda.hpp"

namespace tandem::weight_prep_kernels {

enum class DType { f32, bf16 };

struct BatchNormRef {  // float32 [O] each; all null: no fold
  const float* gamma = nullptr;
  const float* beta = nullptr;
  const float* mean = nullptr;
  const float* var = nullptr;
  float eps = 1e-5f;
};

struct Weight {
  const void* src = nullptr;  // to_channels_last: float32 [O, I, K]; from_channels_last: dtype [O, K, I]
  void* dst = nullptr;        // to_channels_last: dtype [O, K, I];    from_channels_last: float32 [O, I, K]
  std::int64_t out_channels = 0, in_channels = 0, kernel_area = 1;  // K = KH * KW
  BatchNormRef fold;                                                // to_channels_last only
};

void to_channels_last(const std::vector<Weight>& weights, DType dtype, cuda::StreamHandle stream);
void from_channels_last(const std::vector<Weight>& weights, DType dtype, cuda::StreamHandle stream);

struct Bias {
  void* dst = nullptr;  // dtype [O]
  std::int64_t channels = 0;
  BatchNormRef first, second;  // second.gamma null: one BatchNorm
};
void fold_biases(const std::vector<Bias>& biases, DType dtype, cuda::StreamHandle stream);

}  // namespace tandem::weight_prep_kernels
