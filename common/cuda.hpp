// RAII over the CUDA runtime API: streams, events, page-locked registrations and allocations.
// Every handle is move-only and releases on destruction. The header needs no CUDA headers, so
// torch-free and CPU-only code can include it; in a build without CUDA (TANDEM_HAVE_CUDA unset) or on
// a machine without a GPU, device_count() is 0 and constructing a handle throws a UserError that
// says so. Handles are not thread-safe; each is used by the thread that owns it, except Event::query
// and Event::synchronize, which CUDA allows from any thread.
#pragma once

#include <cstddef>
#include <string_view>

#include "common/error.hpp"

struct CUstream_st;
struct CUevent_st;

namespace tandem::cuda {

using StreamHandle = CUstream_st*;  // == cudaStream_t
using EventHandle = CUevent_st*;    // == cudaEvent_t

bool compiled();     // built against the CUDA runtime
int device_count();  // 0 when not compiled or no usable GPU; never throws
void set_device(int device);
// Whether `stream` is recording a CUDA graph: work issued to it now is recorded, not run, and its
// events can be waited on by later captured work only. False without CUDA.
bool capturing(StreamHandle stream);

// Throws CallError("CUDA", status, cudaGetErrorString(status), call, site); TANDEM_CUDA_CHECK calls it.
[[noreturn]] void throw_cuda_error(int status, std::string_view call, CallSite site);

class Stream {
 public:
  Stream() = default;
  static Stream create(int device, bool non_blocking = true, int priority = 0);
  Stream(Stream&& o) noexcept;
  Stream& operator=(Stream&& o) noexcept;
  ~Stream();
  StreamHandle get() const { return stream_; }
  void synchronize() const;
  void wait(EventHandle event) const;  // later work on this stream waits for `event`

 private:
  StreamHandle stream_ = nullptr;
};

class Event {
 public:
  Event() = default;
  static Event create(bool timing = false);
  Event(Event&& o) noexcept;
  Event& operator=(Event&& o) noexcept;
  ~Event();
  EventHandle get() const { return event_; }
  void record(StreamHandle stream);
  [[nodiscard]] bool query() const;  // true once the recorded work completed (or nothing recorded)
  void synchronize() const;
  static float elapsed_ms(const Event& start, const Event& end);

 private:
  EventHandle event_ = nullptr;
};

// cudaHostRegister over memory we do not own (a shared-memory mapping), unregistered on destruction.
// A registration the driver refuses (the locked-memory limit, too little host memory) is a UserError
// that names `what` and the fix.
class HostRegistration {
 public:
  HostRegistration() = default;
  HostRegistration(void* ptr, std::size_t bytes, bool read_only = false, std::string_view what = "shared memory");
  HostRegistration(HostRegistration&& o) noexcept;
  HostRegistration& operator=(HostRegistration&& o) noexcept;
  ~HostRegistration();
  explicit operator bool() const { return ptr_ != nullptr; }

 private:
  void* ptr_ = nullptr;
};

// cudaHostAlloc'd (pinned) or cudaMalloc'd memory.
class Buffer {
 public:
  enum class Kind { pinned_host, device };
  Buffer() = default;
  static Buffer allocate(Kind kind, std::size_t bytes);
  Buffer(Buffer&& o) noexcept;
  Buffer& operator=(Buffer&& o) noexcept;
  ~Buffer();
  void* data() const { return ptr_; }
  std::size_t size() const { return bytes_; }

 private:
  Kind kind_ = Kind::pinned_host;
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
};

// cudaMemcpyAsync with cudaMemcpyDefault (unified addressing decides the direction).
void copy_async(void* dst, const void* src, std::size_t bytes, StreamHandle stream);

}  // namespace tandem::cuda

#define TANDEM_CUDA_CHECK(expr)                                                                         \
  do {                                                                                                  \
    if (const auto tandem_cuda_status_ = (expr); tandem_cuda_status_ != 0)                              \
      ::tandem::cuda::throw_cuda_error(static_cast<int>(tandem_cuda_status_), #expr, TANDEM_CALL_SITE); \
  } while (0)
