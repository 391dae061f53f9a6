// The cuDNN handle for the calling thread and device (ATen's pool, so one cuDNN state per thread
// is shared with ATen's own convolutions), set to the current CUDA stream. Only where this build
// has cuDNN (TANDEM_HAVE_CUDNN) and LibTorch has CUDA (TANDEM_TORCH_CUDA).
#pragma once

#include <ATen/cudnn/Handle.h>
#include <c10/cuda/CUDAStream.h>
#include <cudnn.h>

#include "common/error.hpp"

namespace tandem {

inline cudnnHandle_t cudnn_handle_on_current_stream() {
  cudnnHandle_t h = at::native::getCudnnHandle();
  const cudnnStatus_t status = cudnnSetStream(h, c10::cuda::getCurrentCUDAStream().stream());
  if (status != CUDNN_STATUS_SUCCESS) fail("cuDNN cudnnSetStream failed: {}", cudnnGetErrorString(status));
  return h;
}

}  // namespace tandem
