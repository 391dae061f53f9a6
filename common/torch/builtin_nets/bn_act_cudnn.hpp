// bn_act's second GPU backend: cuDNN's own fused BatchNorm for channels-last activations
// (cudnnBatchNormalizationForwardTrainingEx / BackwardEx, CUDNN_BATCHNORM_SPATIAL_PERSISTENT, with
// the ReLU (CUDNN_BATCHNORM_OPS_BN_ACTIVATION) and the residual add (_BN_ADD_ACTIVATION) inside),
// measured against Tandem's kernels (bn_act_kernels.hpp) by `tandem-bench graph --bn-backend`;
// docs/CUDA_GRAPHS.md says which wins where. Semantics as bn_act.hpp: batch statistics, running
// statistics updated with the unbiased variance, num_batches_tracked counted (a small
// add of its own, or in BatchCounts' one launch, bn_act.hpp).
//
// Built where python3's torch ships cuDNN (common/meson.build, TANDEM_HAVE_CUDNN); elsewhere
// supported() is false. cuDNN's legacy API takes no residual without the ReLU; supported() says
// false there too, and for any shape or dtype this cuDNN refuses (asked once per combination).
// Threads: the caller's; cuDNN runs on the current CUDA stream through ATen's handle.
#pragma once

#include <torch/nn/modules/batchnorm.h>
#include <torch/types.h>

namespace tandem::cudnn_bn {

bool supported(const torch::Tensor& x, bool residual, bool relu);
torch::Tensor bn_act(torch::nn::BatchNorm2dImpl& bn, const torch::Tensor& x, const torch::Tensor& residual, bool relu);

}  // namespace tandem::cudnn_bn
