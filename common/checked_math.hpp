// Overflow-checked unsigned arithmetic for sizes, offsets and counts that come from outside the
// process (a file header, a segment descriptor). Each returns std::nullopt where the exact result
// does not fit in 64 bits, so a caller can name the bad field in its own one-line UserError instead
// of computing with a wrapped value. Torch-free, header-only, any thread.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <span>

namespace tandem {

[[nodiscard]] constexpr std::optional<std::uint64_t> checked_add(std::uint64_t a, std::uint64_t b) {
  std::uint64_t sum = 0;
  if (__builtin_add_overflow(a, b, &sum)) return std::nullopt;
  return sum;
}

[[nodiscard]] constexpr std::optional<std::uint64_t> checked_mul(std::uint64_t a, std::uint64_t b) {
  std::uint64_t product = 0;
  if (__builtin_mul_overflow(a, b, &product)) return std::nullopt;
  return product;
}

// `first` times every factor, e.g. an element size times a shape.
[[nodiscard]] constexpr std::optional<std::uint64_t> checked_product(std::uint64_t first,
                                                                     std::span<const std::uint64_t> factors) {
  std::optional<std::uint64_t> product = first;
  for (std::uint64_t f : factors)
    if (!(product = checked_mul(*product, f))) return std::nullopt;
  return product;
}

[[nodiscard]] constexpr std::optional<std::uint64_t> checked_product(std::uint64_t first,
                                                                     std::initializer_list<std::uint64_t> factors) {
  return checked_product(first, std::span<const std::uint64_t>(factors.begin(), factors.size()));
}

static_assert(!checked_mul(1ull << 32, 1ull << 32) && checked_mul(1ull << 31, 1ull << 32) == 1ull << 63);
static_assert(!checked_add(~0ull, 1) && checked_product(2, {3, 4}) == 24);

}  // namespace tandem
