// Reading dataset files: move-only RAII handles over a plain file (pread, any thread) and a gzip
// stream (zlib; sequential, one thread). Every short read or decode error is a UserError naming the
// file, so a bad input is one line for the user and never a crash.
#pragma once

#include <zlib.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

#include "common/file_descriptor.hpp"

namespace tandem::data {

class File {
 public:
  explicit File(const std::filesystem::path& path);  // UserError if it cannot be opened
  File(File&& other) noexcept = default;
  File& operator=(File&&) = delete;

  std::uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // Reads exactly `bytes` at `offset`; any thread may call it concurrently.
  void read_at(std::uint64_t offset, void* dst, std::size_t bytes) const;

 private:
  std::string path_;
  FileDescriptor fd_;
  std::uint64_t size_ = 0;
};

bool is_gzip(const File& file);

// The most bytes `compressed` bytes of gzip can inflate to. Deflate's best ratio is 1032:1 (a
// 258-byte match per ~2 bits of code); the constant covers a tiny file's headers and a final
// partial block. A header that claims more than this is refused without inflating anything.
inline constexpr std::uint64_t kMaxDeflateRatio = 1032;
std::uint64_t max_gunzip_bytes(std::uint64_t compressed);

// Reads a file through zlib; a file without the gzip magic is read as is (zlib's transparent mode).
class GzReader {
 public:
  explicit GzReader(const std::filesystem::path& path);
  GzReader(GzReader&& other) noexcept;
  GzReader& operator=(GzReader&&) = delete;
  ~GzReader();

  // Reads exactly `bytes` or throws a UserError that says the file is truncated or corrupt.
  void read(void* dst, std::size_t bytes);
  // Inflates and drops exactly `bytes` (same errors as read), then fails unless the stream ends
  // there: proves a compressed file holds what its header claims before any memory is reserved.
  void skip_to_exact_end(std::uint64_t bytes);

 private:
  std::string path_;
  gzFile gz_ = nullptr;
};

}  // namespace tandem::data
