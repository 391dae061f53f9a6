#include "datasets/input_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <utility>
#include <vector>

#include "common/checked_math.hpp"
#include "common/error.hpp"

namespace tandem::data {

File::File(const std::filesystem::path& path) : path_(path.string()), fd_(::open(path_.c_str(), O_RDONLY | O_CLOEXEC)) {
  if (!fd_) fail("cannot open {}: {}", path_, std::strerror(errno));
  struct stat st {};
  TANDEM_CHECK_SYS(::fstat(fd_.get(), &st));
  if (!S_ISREG(st.st_mode)) fail("{} is not a regular file", path_);
  size_ = static_cast<std::uint64_t>(st.st_size);
}

void File::read_at(std::uint64_t offset, void* dst, std::size_t bytes) const {
  auto* out = static_cast<char*>(dst);
  while (bytes > 0) {
    ssize_t n = ::pread(fd_.get(), out, std::min<std::size_t>(bytes, 1u << 30), static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail("cannot read {}: {}", path_, std::strerror(errno));
    if (n == 0) fail("{} ended early at byte {}: the file is truncated", path_, offset);
    out += n;
    offset += static_cast<std::uint64_t>(n);
    bytes -= static_cast<std::size_t>(n);
  }
}

bool is_gzip(const File& file) {
  unsigned char magic[2] = {0, 0};
  if (file.size() < 2) return false;
  file.read_at(0, magic, 2);
  return magic[0] == 0x1f && magic[1] == 0x8b;
}

std::uint64_t max_gunzip_bytes(std::uint64_t compressed) {
  constexpr std::uint64_t kSlack = 64u << 10;
  return checked_add(checked_mul(compressed, kMaxDeflateRatio).value_or(~0ull), kSlack).value_or(~0ull);
}

GzReader::GzReader(const std::filesystem::path& path) : path_(path.string()) {
  gz_ = ::gzopen(path_.c_str(), "rb");
  if (gz_ == nullptr) fail("cannot open {}: {}", path_, std::strerror(errno));
  // 1 MiB reads for real datasets; a small file gets a small buffer (zlib allocates 3x this).
  std::error_code ec;
  const std::uint64_t size = std::filesystem::file_size(path, ec);
  ::gzbuffer(gz_, static_cast<unsigned>(std::clamp<std::uint64_t>(ec ? 0 : size, 8u << 10, 1u << 20)));
}

GzReader::GzReader(GzReader&& other) noexcept : path_(std::move(other.path_)), gz_(std::exchange(other.gz_, nullptr)) {}

GzReader::~GzReader() {
  if (gz_ != nullptr) ::gzclose_r(gz_);
}

void GzReader::read(void* dst, std::size_t bytes) {
  auto* out = static_cast<char*>(dst);
  while (bytes > 0) {
    unsigned chunk = static_cast<unsigned>(std::min<std::size_t>(bytes, INT_MAX / 2));
    int n = ::gzread(gz_, out, chunk);
    if (n <= 0) {
      int code = Z_OK;
      std::string_view msg = ::gzerror(gz_, &code);
      if (msg.starts_with(path_ + ": ")) msg.remove_prefix(path_.size() + 2);  // zlib prefixes the path
      fail("{} is truncated or corrupt: {} (re-download it)", path_,
           n == 0 || code == Z_OK ? "it ends before the data its header promises" : msg);
    }
    out += n;
    bytes -= static_cast<std::size_t>(n);
  }
}

void GzReader::skip_to_exact_end(std::uint64_t bytes) {
  std::vector<char> scratch(static_cast<std::size_t>(std::min<std::uint64_t>(bytes, 1u << 20)) + 1);
  for (std::uint64_t left = bytes; left > 0;) {
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(left, scratch.size()));
    read(scratch.data(), n);
    left -= n;
  }
  const int extra = ::gzread(gz_, scratch.data(), 1);
  int code = Z_OK;
  ::gzerror(gz_, &code);
  if (extra < 0 || code != Z_OK) read(scratch.data(), 1);  // throws, in zlib's words where it has some
  if (extra > 0)
    fail(
        "{} holds more data than its header says ({} bytes after the header): the file is corrupt or not "
        "what its name says (re-download it)",
        path_, bytes);
}

}  // namespace tandem::data
