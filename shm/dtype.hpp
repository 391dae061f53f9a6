// Element types as the shared-memory formats store them: a u32 code in a field table (dataset cache)
// or a tensor table (weight slab). The codes are part of the formats (docs/FORMAT.md, the element
// type table under "Dataset cache"): never renumber one. Names are numpy's spelling, so a Python
// reader maps them directly.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace tandem::shm {

enum class DType : std::uint32_t {
  u8 = 1,
  i8 = 2,
  i16 = 3,
  i32 = 4,
  i64 = 5,
  f16 = 6,
  f32 = 7,
  f64 = 8,
  u16 = 9,
  u32 = 10,
  bf16 = 11
};
static_assert(sizeof(DType) == 4);

std::size_t dtype_size(DType dtype);       // bytes of one element; 0 for an unknown code
std::string_view dtype_name(DType dtype);  // numpy's spelling: "uint8", "float32", ...; "unknown"

}  // namespace tandem::shm
