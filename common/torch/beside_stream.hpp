// Work beside the current CUDA stream: a convolution's weight gradient runs on a second stream while
// the backward's chain of data gradients goes on, and whatever reads it joins first.
//
//   Tensor dw = run_beside([&] { return weight_grad(dy, x, w); }, {dy, x});  // in a backward
//   ...
//   join_beside();  // before anything on the current stream reads dw
//
// Why: a backward's data gradients form one chain (each layer's needs the next layer's), while the
// weight gradients are leaves nothing else in that backward reads. On one stream they take turns,
// and at ResNet-18's small late layers neither fills the GPU (layer 4 at batch 128 is 2048 pixels of
// 4x4 images). On two streams they overlap. In a CUDA-graph capture the fork and the join become the
// graph's edges, so a replay runs both branches at once with nothing on the host.
//
// Contract: after run_beside on a device, join_beside on that device before its results are read on
// another stream, and before a capture ends (CUDA refuses a capture whose side stream was not joined).
// `uses` names the tensors fn reads that the current stream made, so that the caching allocator does
// not hand their memory out again while the side stream still reads it; fn's result is marked as
// read on the current stream for the same reason. set_beside_enabled(false) makes run_beside run fn
// on the current stream (for benchmarks' A/B runs and tests).
// Threads: any (autograd's device thread runs backward); the per-device state is under a lock. One
// backward at a time per device: a join joins everything run beside on that device so far. Memory
// ordering: CUDA events between the streams; nothing on the host waits. In a build whose LibTorch
// has no CUDA, run_beside runs fn and join_beside does nothing.
#pragma once

#include <torch/types.h>

#include <functional>
#include <initializer_list>

#ifdef TANDEM_TORCH_CUDA
#include <c10/cuda/CUDAStream.h>
#endif

namespace tandem {

torch::Tensor run_beside(const std::function<torch::Tensor()>& fn, std::initializer_list<torch::Tensor> uses);
void join_beside();

void set_beside_enabled(bool enabled);
bool beside_enabled();

#ifdef TANDEM_TORCH_CUDA
// Makes `then` wait for everything queued on `first` so far: an event, no host wait (in a capture,
// an edge of the graph).
void cuda_wait(const c10::cuda::CUDAStream& first, const c10::cuda::CUDAStream& then);
#endif

}  // namespace tandem
