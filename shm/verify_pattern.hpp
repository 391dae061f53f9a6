// The verify pattern (docs/FORMAT.md, "Verify pattern"): a payload that betrays a torn read. Benchmarks
// (`tandem bench publish --verify`), tests and tools/tandem_shm.py fill slots with it and check what
// readers copied out.
//
// Bytes [0, 8) and [n - 8, n) hold the version (little-endian u64); every byte between is
// verify_byte(version). Consecutive versions differ in every byte, so a copy that mixes two versions
// fails check_verify_pattern. Pure functions over caller-owned bytes: any thread.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tandem::shm {

inline constexpr std::uint8_t verify_byte(std::uint64_t version) {
  return static_cast<std::uint8_t>((version * 131 + 7) % 251 + 1);
}
// Throws std::invalid_argument for fewer than 16 bytes.
void fill_verify_pattern(std::byte* data, std::size_t bytes, std::uint64_t version);
[[nodiscard]] bool check_verify_pattern(const std::byte* data, std::size_t bytes, std::uint64_t version);

}  // namespace tandem::shm
