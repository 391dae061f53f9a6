// The CUDA kernels of the fused BatchNorm (+ residual add) + ReLU for channels-last activations
// (bn_act.hpp is the LibTorch-facing op). Torch-free: raw device pointers, built by nvcc only where
// LibTorch has CUDA (common/torch/meson.build defines TANDEM_GPU_KERNELS then).
//
// Layout: an activation [N, C, H, W] in channels-last memory is a row-major [rows = N*H*W, C] matrix.
// Activations are float32 or bfloat16; BatchNorm's parameters, statistics and gradients float32.
// Each direction is two launches:
//   forward:  statistics (per-channel shifted sums, then the last block to finish finalises: mean,
//             inverse std, the affine scale/shift, running statistics, num_batches_tracked), then
//             y = relu(x * scale + shift + residual) with one byte per 16-byte vector recording
//             which outputs ReLU passed (the backward's mask, 1/16 of the activation's bytes);
//   backward: the two gradient sums (dbias = sum dz, dweight = invstd * sum dz (x - mean), dz being dy
//             where ReLU passed), finalised by the last block into the input gradient's coefficients,
//             then dx = a dz + b (x - mean) + e, and d_residual = dz.
// The sums are added in a fixed order (thread, block tree, then blocks in index order), so results
// are deterministic. workspace_bytes() says how much device memory a launch needs.
//
// Threads: any host thread; the launches enqueue on `stream` and never synchronise. Two launches
// may not share a workspace concurrently.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/cuda.hpp"

namespace tandem::bn_act_kernels {

enum class DType { f32, bf16 };

// The widest supported shape: channels a multiple of 4 (float32) or 8 (bfloat16), at most 4096.
bool supported(DType dtype, std::int64_t channels);
// Bytes of device workspace a forward or backward of this shape needs (16-byte aligned).
std::size_t workspace_bytes(DType dtype, std::int64_t rows, std::int64_t channels);

struct Forward {
  DType dtype = DType::f32;
  std::int64_t rows = 0, channels = 0;  // rows > 1
  const void* x = nullptr;              // [rows, channels]
  const void* residual = nullptr;       // same shape, or nullptr
  void* y = nullptr;                    // same shape
  std::uint8_t* mask = nullptr;         // rows * channels / (4 or 8) bytes when relu, else unused
  bool relu = true;
  const float* weight = nullptr;  // [channels] each
  const float* bias = nullptr;
  float* running_mean = nullptr;
  float* running_var = nullptr;
  std::int64_t* num_batches_tracked = nullptr;
  float momentum = 0.1f, eps = 1e-5f;
  float* save_mean = nullptr;  // [channels]: the batch mean and 1/sqrt(var + eps)
  float* save_invstd = nullptr;
  void* workspace = nullptr;  // workspace_bytes(dtype, rows, channels)
};
void forward_training(const Forward& f, cuda::StreamHandle stream);

struct Backward {
  DType dtype = DType::f32;
  std::int64_t rows = 0, channels = 0;
  const void* dy = nullptr;            // [rows, channels]
  const void* x = nullptr;             // the forward's input
  const std::uint8_t* mask = nullptr;  // the forward's mask when relu
  bool relu = true;
  const float* weight = nullptr;
  const float* save_mean = nullptr;
  const float* save_invstd = nullptr;
  void* dx = nullptr;         // [rows, channels]
  void* dresidual = nullptr;  // [rows, channels], or nullptr
  float* dweight = nullptr;   // [channels]
  float* dbias = nullptr;
  void* workspace = nullptr;
};
void backward(const Backward& b, cuda::StreamHandle stream);

}  // namespace tandem::bn_act_kernels
