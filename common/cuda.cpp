#include "common/cuda.hpp"

#include <utility>

#ifdef TANDEM_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace tandem::cuda {

#ifdef TANDEM_HAVE_CUDA

bool compiled() { return true; }

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return n;
}

void throw_cuda_error(int status, std::string_view call, CallSite site) {
  throw CallError("CUDA", status, cudaGetErrorString(static_cast<cudaError_t>(status)), call, site);
}

static void require_gpu() {
  if (device_count() == 0) fail("no CUDA GPU is visible to this process: run on a GPU machine or use the CPU path");
}

void set_device(int device) {
  require_gpu();
  if (device < 0 || device >= device_count())
    fail(
        "cuda:{} does not exist: this machine has {} GPU(s) (cuda:0..cuda:{}); choose a device in that range "
        "or start fewer local ranks",
        device, device_count(), device_count() - 1);
  TANDEM_CUDA_CHECK(cudaSetDevice(device));
}

Stream Stream::create(int device, bool non_blocking, int priority) {
  set_device(device);
  Stream s;
  TANDEM_CUDA_CHECK(
      cudaStreamCreateWithPriority(&s.stream_, non_blocking ? cudaStreamNonBlocking : cudaStreamDefault, priority));
  return s;
}
Stream::~Stream() {
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}
void Stream::synchronize() const { TANDEM_CUDA_CHECK(cudaStreamSynchronize(stream_)); }
void Stream::wait(EventHandle event) const { TANDEM_CUDA_CHECK(cudaStreamWaitEvent(stream_, event, 0)); }

bool capturing(StreamHandle stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  TANDEM_CUDA_CHECK(cudaStreamIsCapturing(stream, &status));
  return status != cudaStreamCaptureStatusNone;
}

Event Event::create(bool timing) {
  require_gpu();
  Event e;
  TANDEM_CUDA_CHECK(cudaEventCreateWithFlags(&e.event_, timing ? cudaEventDefault : cudaEventDisableTiming));
  return e;
}
Event::~Event() {
  if (event_ != nullptr) cudaEventDestroy(event_);
}
void Event::record(StreamHandle stream) { TANDEM_CUDA_CHECK(cudaEventRecord(event_, stream)); }
bool Event::query() const {
  cudaError_t st = cudaEventQuery(event_);
  if (st == cudaErrorNotReady) return false;
  TANDEM_CUDA_CHECK(st);
  return true;
}
void Event::synchronize() const { TANDEM_CUDA_CHECK(cudaEventSynchronize(event_)); }
float Event::elapsed_ms(const Event& start, const Event& end) {
  float ms = 0;
  TANDEM_CUDA_CHECK(cudaEventElapsedTime(&ms, start.event_, end.event_));
  return ms;
}

HostRegistration::HostRegistration(void* ptr, std::size_t bytes, bool read_only, std::string_view what) {
  require_gpu();
  unsigned flags = cudaHostRegisterPortable | (read_only ? cudaHostRegisterReadOnly : 0);
  const cudaError_t status = cudaHostRegister(ptr, bytes, flags);
  if (status == cudaErrorMemoryAllocation || status == cudaErrorNotSupported || status == cudaErrorNotPermitted) {
    cudaGetLastError();  // not sticky, but leave no error behind for the next call to find
    fail(
        "pinning {} bytes of {} for GPU copies failed ({}): raise the locked-memory limit (`ulimit -l unlimited`; "
        "in a container, --ulimit memlock=-1) or free host memory",
        bytes, what, cudaGetErrorString(status));
  }
  TANDEM_CUDA_CHECK(status);
  ptr_ = ptr;
}
HostRegistration::~HostRegistration() {
  if (ptr_ != nullptr) cudaHostUnregister(ptr_);
}

Buffer Buffer::allocate(Kind kind, std::size_t bytes) {
  require_gpu();
  Buffer b;
  b.kind_ = kind;
  b.bytes_ = bytes;
  if (kind == Kind::pinned_host) TANDEM_CUDA_CHECK(cudaHostAlloc(&b.ptr_, bytes, cudaHostAllocPortable));
  else TANDEM_CUDA_CHECK(cudaMalloc(&b.ptr_, bytes));
  return b;
}
Buffer::~Buffer() {
  if (ptr_ == nullptr) return;
  if (kind_ == Kind::pinned_host) cudaFreeHost(ptr_);
  else cudaFree(ptr_);
}

void copy_async(void* dst, const void* src, std::size_t bytes, StreamHandle stream) {
  TANDEM_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream));
}

#else  // built without CUDA: every handle refuses to exist, with a message that says why.

bool compiled() { return false; }
int device_count() { return 0; }
[[noreturn]] static void not_built() {
  fail("this build of Tandem has no CUDA support: rebuild where the CUDA toolkit is installed (-Dcuda=enabled)");
}
void set_device(int) { not_built(); }
void throw_cuda_error(int status, std::string_view call, CallSite site) {
  throw CallError("CUDA", status, "CUDA runtime not built in", call, site);
}
Stream Stream::create(int, bool, int) { not_built(); }
Stream::~Stream() = default;
void Stream::synchronize() const { not_built(); }
void Stream::wait(EventHandle) const { not_built(); }
bool capturing(StreamHandle) { return false; }
Event Event::create(bool) { not_built(); }
Event::~Event() = default;
void Event::record(StreamHandle) { not_built(); }
bool Event::query() const { return true; }
void Event::synchronize() const {}
float Event::elapsed_ms(const Event&, const Event&) { not_built(); }
HostRegistration::HostRegistration(void*, std::size_t, bool, std::string_view) { not_built(); }
HostRegistration::~HostRegistration() = default;
Buffer Buffer::allocate(Kind, std::size_t) { not_built(); }
Buffer::~Buffer() = default;
void copy_async(void*, const void*, std::size_t, StreamHandle) { not_built(); }

#endif

// Moves are the same with or without CUDA: they hand the handle over and leave the source empty.
Stream::Stream(Stream&& o) noexcept : stream_(std::exchange(o.stream_, nullptr)) {}
Stream& Stream::operator=(Stream&& o) noexcept {
  std::swap(stream_, o.stream_);
  return *this;
}
Event::Event(Event&& o) noexcept : event_(std::exchange(o.event_, nullptr)) {}
Event& Event::operator=(Event&& o) noexcept {
  std::swap(event_, o.event_);
  return *this;
}
HostRegistration::HostRegistration(HostRegistration&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)) {}
HostRegistration& HostRegistration::operator=(HostRegistration&& o) noexcept {
  std::swap(ptr_, o.ptr_);
  return *this;
}
Buffer::Buffer(Buffer&& o) noexcept
    : kind_(o.kind_), ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
Buffer& Buffer::operator=(Buffer&& o) noexcept {
  std::swap(kind_, o.kind_);
  std::swap(ptr_, o.ptr_);
  std::swap(bytes_, o.bytes_);
  return *this;
}

}  // namespace tandem::cuda
