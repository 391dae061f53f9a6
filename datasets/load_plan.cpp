#include "datasets/load_plan.hpp"

#include <cstring>

namespace tandem::data {

bool is_integer(shm::DType d) {
  using shm::DType;
  return d == DType::u8 || d == DType::i8 || d == DType::i16 || d == DType::u16 || d == DType::i32 || d == DType::u32 ||
         d == DType::i64;
}

namespace {
template <class T>
void widen(const std::byte* in, std::int64_t* out, std::size_t count) {
  for (std::size_t i = 0; i < count; ++i) {
    T v;
    std::memcpy(&v, in + i * sizeof(T), sizeof(T));  // inputs need not be aligned
    out[i] = static_cast<std::int64_t>(v);           // NOLINT(bugprone-signed-char-misuse): int8 labels are signed
  }
}
}  // namespace

void widen_to_i64(shm::DType from, const std::byte* in, std::int64_t* out, std::size_t count) {
  using shm::DType;
  switch (from) {
    case DType::u8: return widen<std::uint8_t>(in, out, count);
    case DType::i8: return widen<std::int8_t>(in, out, count);
    case DType::i16: return widen<std::int16_t>(in, out, count);
    case DType::u16: return widen<std::uint16_t>(in, out, count);
    case DType::i32: return widen<std::int32_t>(in, out, count);
    case DType::u32: return widen<std::uint32_t>(in, out, count);
    case DType::i64: return widen<std::int64_t>(in, out, count);
    default: break;
  }
  std::abort();  // callers check is_integer() first
}

}  // namespace tandem::data
