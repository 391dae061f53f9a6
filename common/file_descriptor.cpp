#include "common/file_descriptor.hpp"

#include <unistd.h>

namespace tandem {

void FileDescriptor::reset(int fd) noexcept {
  if (fd_ >= 0 && fd_ != fd) ::close(fd_);
  fd_ = fd;
}

}  // namespace tandem
