// BatchNorm2d -> ReLU -> 2x2 max-pool (stride 2) as one CPU operation: the cnn's conv blocks.
//
//   torch::Tensor p = bn_relu_pool(bn, conv->forward(x));  // == max_pool2d(relu(bn(y)), 2)
//
// Why: on a CPU the three ATen ops make ~7 passes over the conv output forward and ~8 backward
// (BatchNorm's statistics and normalisation, ReLU, pool with int64 indices, the pool's zero-filled
// gradient, ReLU's mask, BatchNorm's two backward passes). At batch 128 the cnn's first block streams
// ~90 MB a step through memory that the ranks of one node share. Fused: 2 passes forward (statistics;
// normalise + ReLU + pool, keeping for each output the winning window position, one byte, and the
// winner's input) and 2 backward (the two BatchNorm sums, over those pooled values only; the dense
// input gradient), ~3x less traffic.
//
// Applies when the input is a float32 CPU tensor in channels-last layout (or one channel) with even
// height and width, and the module is affine with running statistics; otherwise the three ATen ops
// run, so the result is the same function everywhere. Training mode: batch statistics, running
// statistics and num_batches_tracked updated exactly as nn::BatchNorm2d does (biased variance for
// the normalisation, unbiased into running_var). Eval mode: running statistics, no autograd state.
// Values match the ATen ops to rounding (sums are taken in a different order); ties in a window go
// to the first position in (row, column) order, NaN propagates, as max_pool2d does.
//
// Threads: the caller's; the passes split the batch over LibTorch's intra-op threads
// (at::parallel_for), with per-chunk partial sums added in a fixed order.
// Kernels: built per instruction set (fused_bn_relu_pool_kernels.hpp); the widest the CPU runs is used.
#pragma once

#include <torch/nn/modules/batchnorm.h>
#include <torch/types.h>

#include <string>
#include <vector>

namespace tandem {

torch::Tensor bn_relu_pool(torch::nn::BatchNorm2d& bn, const torch::Tensor& x);

// Whether bn_relu_pool(bn, x) takes the fused path (tests pin that the cnn's blocks do).
bool bn_relu_pool_is_fused(const torch::nn::BatchNorm2d& bn, const torch::Tensor& x);

// The kernel builds this CPU runs, widest first ("avx512", "avx2", "baseline"), and, for tests and
// benchmarks, a way to pin one ("" = the widest again). UserError for a build this CPU cannot run.
// Not to be called while another thread runs bn_relu_pool.
std::vector<std::string> bn_relu_pool_isas();
void bn_relu_pool_force_isa(const std::string& isa);

}  // namespace tandem
