// A file descriptor that closes itself: every descriptor our code opens (files, shm objects, pipes,
// sockets) is held by one of these, so no exit path leaks one into a child or past its use.
//
//   FileDescriptor fd(::open(path, O_RDONLY | O_CLOEXEC));
//   if (!fd) fail("cannot open {}: {}", path, std::strerror(errno));
//   ::read(fd.get(), ...);
//
// Move-only, like every handle here (a copy would close twice). A negative value means "none", so
// the result of a failed open() can be held and tested. release() hands the descriptor to code that
// closes it itself (an Asio stream). close() errors are ignored: on Linux the descriptor is gone
// even when close() reports one, and a retry could close a descriptor another thread just got.
//
// Threads: one owner; get() may be used from any thread the owner lets use it.
#pragma once

#include <utility>

namespace tandem {

class FileDescriptor {
 public:
  FileDescriptor() = default;
  explicit FileDescriptor(int fd) noexcept : fd_(fd) {}
  FileDescriptor(FileDescriptor&& other) noexcept : fd_(other.release()) {}
  FileDescriptor& operator=(FileDescriptor&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  ~FileDescriptor() { reset(); }

  int get() const noexcept { return fd_; }
  explicit operator bool() const noexcept { return fd_ >= 0; }
  [[nodiscard]] int release() noexcept { return std::exchange(fd_, -1); }
  void reset(int fd = -1) noexcept;  // closes the one held, then holds `fd`

 private:
  int fd_ = -1;
};

}  // namespace tandem
