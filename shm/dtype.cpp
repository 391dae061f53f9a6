#include "shm/dtype.hpp"

namespace tandem::shm {

std::size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::u8:
    case DType::i8: return 1;
    case DType::i16:
    case DType::u16:
    case DType::f16:
    case DType::bf16: return 2;
    case DType::i32:
    case DType::u32:
    case DType::f32: return 4;
    case DType::i64:
    case DType::f64: return 8;
  }
  return 0;
}

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::u8: return "uint8";
    case DType::i8: return "int8";
    case DType::i16: return "int16";
    case DType::u16: return "uint16";
    case DType::i32: return "int32";
    case DType::u32: return "uint32";
    case DType::i64: return "int64";
    case DType::f16: return "float16";
    case DType::bf16: return "bfloat16";
    case DType::f32: return "float32";
    case DType::f64: return "float64";
  }
  return "unknown";
}

}  // namespace tandem::shm
