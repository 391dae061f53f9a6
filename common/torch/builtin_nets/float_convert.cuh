// float32 <-> the element types of common/torch's CUDA kernels (float32, bfloat16), for their .cu
// files: the kernels load any of them as float, compute in float and store back.
#pragma once

#include <cuda_bf16.h>

#include <type_traits>

namespace tandem::gpu {

template <typename T>
__device__ __forceinline__ float to_float(T v) {
  if constexpr (std::is_same_v<T, float>) return v;
  else return __bfloat162float(v);
}

template <typename T>
__device__ __forceinline__ T from_float(float v) {
  if constexpr (std::is_same_v<T, float>) return v;
  else return __float2bfloat16_rn(v);
}

}  // namespace tandem::gpu
