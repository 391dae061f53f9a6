#include "python/bindings/tensors.hpp"

#include <torch/types.h>
#include <torch/version.h>

#include "common/error.hpp"

namespace tandem::python {

at::ScalarType scalar_type_of(shm::DType dtype, std::string_view what) {
  switch (dtype) {
    case shm::DType::u8: return at::kByte;
    case shm::DType::i8: return at::kChar;
    case shm::DType::i16: return at::kShort;
    case shm::DType::i32: return at::kInt;
    case shm::DType::i64: return at::kLong;
    case shm::DType::f16: return at::kHalf;
    case shm::DType::f32: return at::kFloat;
    case shm::DType::f64: return at::kDouble;
    case shm::DType::bf16: return at::kBFloat16;
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
    case shm::DType::u16: return at::ScalarType::UInt16;
    case shm::DType::u32: return at::ScalarType::UInt32;
#endif
    default: break;
  }
  fail(ErrorKind::dtype,
       "{} is {}, which this torch ({}) has no dtype for: read it with tools/tandem_shm.py (numpy), or use "
       "torch >= 2.3",
       what, shm::dtype_name(dtype), TORCH_VERSION);
}

shm::DType format_dtype_of(at::ScalarType type, std::string_view what) {
  switch (type) {
    case at::kByte: return shm::DType::u8;
    case at::kChar: return shm::DType::i8;
    case at::kShort: return shm::DType::i16;
    case at::kInt: return shm::DType::i32;
    case at::kLong: return shm::DType::i64;
    case at::kHalf: return shm::DType::f16;
    case at::kFloat: return shm::DType::f32;
    case at::kDouble: return shm::DType::f64;
    case at::kBFloat16: return shm::DType::bf16;
    default: break;
  }
  fail(ErrorKind::dtype,
       "{} is {}, which Tandem's segments cannot hold: use one of uint8, int8, int16, int32, int64, "
       "float16, bfloat16, float32, float64",
       what, c10::toString(type));
}

at::Tensor view_of(std::shared_ptr<const void> owner, const std::byte* data, const std::vector<std::int64_t>& shape,
                   at::ScalarType dtype) {
  // from_blob's deleter is a std::function: the captured owner is released when the storage dies.
  return torch::from_blob(
      const_cast<std::byte*>(data), shape, [owner = std::move(owner)](void*) mutable { owner.reset(); },
      torch::TensorOptions().dtype(dtype));
}

}  // namespace tandem::python
