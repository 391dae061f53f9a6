#include "shm/verify_pattern.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace tandem::shm {

void fill_verify_pattern(std::byte* data, std::size_t bytes, std::uint64_t version) {
  if (bytes < 16) throw std::invalid_argument("verify pattern needs at least 16 bytes");
  std::memset(data + 8, verify_byte(version), bytes - 16);
  std::memcpy(data, &version, 8);
  std::memcpy(data + bytes - 8, &version, 8);
}

bool check_verify_pattern(const std::byte* data, std::size_t bytes, std::uint64_t version) {
  if (bytes < 16) return false;
  std::uint64_t head = 0, tail = 0;
  std::memcpy(&head, data, 8);
  std::memcpy(&tail, data + bytes - 8, 8);
  if (head != version || tail != version) return false;
  static constexpr std::size_t kChunk = 4096;
  std::byte expect[kChunk];
  std::memset(expect, verify_byte(version), kChunk);
  for (std::size_t off = 8; off < bytes - 8; off += kChunk) {
    std::size_t n = std::min(kChunk, bytes - 8 - off);
    if (std::memcmp(data + off, expect, n) != 0) return false;
  }
  return true;
}

}  // namespace tandem::shm
