#include "tests/fuzz/segment_input.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "common/file_descriptor.hpp"

namespace tandem::fuzz {

std::string own_name() { return "fuzz" + std::to_string(::getpid()); }

SegmentFromBytes::SegmentFromBytes(const std::string& name, shm::Kind kind, std::uint32_t layout,
                                   const std::uint8_t* data, std::size_t size)
    : name_(name) {
  const std::uint8_t flags = size > 0 ? data[0] : 0;
  const std::uint8_t* rest = size > 0 ? data + 1 : data;
  const std::size_t rest_size = size > 0 ? size - 1 : 0;
  const std::size_t header_part = std::min(rest_size, shm::kHeaderBytes);
  const std::size_t payload_part = rest_size - header_part;
  const std::uint64_t object = shm::kPayloadAlignment + (payload_part + 4095) / 4096 * 4096 +
                               std::uint64_t{(flags >> 4) & 7u} * shm::kPayloadAlignment;

  std::vector<std::byte> header(shm::kHeaderBytes);
  std::memcpy(header.data(), rest, header_part);
  if (flags & 1) {
    auto* h = reinterpret_cast<shm::SegmentHeader*>(header.data());
    h->magic = shm::kMagic;
    h->kind = kind;
    h->layout_version = layout;
    h->total_size = object;
    if (flags & 2) h->payload_offset = shm::kPayloadAlignment;
    h->ready.store(static_cast<std::uint32_t>(shm::Ready::ready), std::memory_order_relaxed);
    h->header_checksum = shm::header_checksum(header.data());
  } else if (flags & 2) {
    reinterpret_cast<shm::SegmentHeader*>(header.data())->payload_offset = shm::kPayloadAlignment;
  }

  const std::string path = "/dev/shm/" + name_;
  const FileDescriptor fd(::open(path.c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0600));
  if (fd.get() < 0) std::abort();  // the harness itself failed: not a finding about the input
  bool ok = ::ftruncate(fd.get(), static_cast<off_t>(object)) == 0 &&
            ::pwrite(fd.get(), header.data(), header.size(), 0) == static_cast<ssize_t>(header.size());
  if (payload_part > 0)
    ok = ok && ::pwrite(fd.get(), rest + header_part, payload_part, static_cast<off_t>(shm::kPayloadAlignment)) ==
                   static_cast<ssize_t>(payload_part);
  if (!ok) std::abort();
}

SegmentFromBytes::~SegmentFromBytes() { ::unlink(("/dev/shm/" + name_).c_str()); }

std::uint64_t touch(const void* p, std::size_t n) {
  const auto* b = static_cast<const std::uint8_t*>(p);
  std::uint64_t sum = 0;
  for (std::size_t i = 0; i < n; ++i) sum += b[i];
  return sum;
}

}  // namespace tandem::fuzz
