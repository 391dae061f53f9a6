// Reading dataset files: move-only RAII handles over a plain file (pread, any thread) and a gzip
// stream (zlib; sequential, one thread). Every short read or decode error is a UserError naming the
// file, so a bad input is one line for the user and never a crash.
#pragma once

#include <zlib.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

namespace tandem::data {

class File {
 public:
  explicit File(const std::filesystem::path& path);  // UserError if it cannot be opened
  File(File&& other) noexcept;
  File& operator=(File&&) = delete;
  ~File();

  std::uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // Reads exactly `bytes` at `offset`; any thread may call it concurrently.
  void read_at(std::uint64_t offset, void* dst, std::size_t bytes) const;

 private:
  std::string path_;
  int fd_ = -1;
  std::uint64_t size_ = 0;
};

bool is_gzip(const File& file);
// The gzip trailer's ISIZE: the uncompressed size modulo 2^32 (of the last member).
std::uint32_t gzip_trailer_size(const File& file);

// Reads a file through zlib; a file without the gzip magic is read as is (zlib's transparent mode).
class GzReader {
 public:
  explicit GzReader(const std::filesystem::path& path);
  GzReader(GzReader&& other) noexcept;
  GzReader& operator=(GzReader&&) = delete;
  ~GzReader();

  // Reads exactly `bytes` or throws a UserError that says the file is truncated or corrupt.
  void read(void* dst, std::size_t bytes);

 private:
  std::string path_;
  gzFile gz_ = nullptr;
};

}  // namespace tandem::data
