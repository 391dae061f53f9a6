#include "common/cuda_ipc.hpp"

#include <utility>

#include "common/cuda.hpp"
#include "common/error.hpp"

#ifdef TANDEM_HAVE_CUDA
#include <cuda_runtime_api.h>

#include <cstring>
#endif

namespace tandem::cuda {

#ifdef TANDEM_HAVE_CUDA

static_assert(sizeof(cudaIpcMemHandle_t) == kIpcHandleBytes);

DeviceIdentity device_identity(int device) {
  cudaDeviceProp prop{};
  TANDEM_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  DeviceIdentity id;
  static_assert(sizeof prop.uuid == 16);
  std::memcpy(id.uuid.data(), &prop.uuid, 16);
  char bus[32] = {};
  TANDEM_CUDA_CHECK(cudaDeviceGetPCIBusId(bus, sizeof bus, device));
  id.pci_bus_id = bus;
  return id;
}

int device_with_uuid(const std::array<std::uint8_t, 16>& uuid) {
  for (int d = 0; d < device_count(); ++d)
    if (device_identity(d).uuid == uuid) return d;
  return -1;
}

bool can_access_peer(int device, int peer) {
  if (device == peer) return true;
  int can = 0;
  TANDEM_CUDA_CHECK(cudaDeviceCanAccessPeer(&can, device, peer));
  return can != 0;
}

void enable_peer_access(int device, int peer) {
  if (device == peer) return;
  if (!can_access_peer(device, peer))
    fail("GPU {} cannot reach GPU {}'s memory directly (no NVLink or PCIe peer path): use GPUs that can", device, peer);
  set_device(device);
  const cudaError_t status = cudaDeviceEnablePeerAccess(peer, 0);
  if (status == cudaErrorPeerAccessAlreadyEnabled) {
    (void)cudaGetLastError();  // the call leaves its error as the last one: clear it
    return;
  }
  TANDEM_CUDA_CHECK(status);
}

IpcHandle ipc_export(void* device_allocation) {
  cudaIpcMemHandle_t h;
  TANDEM_CUDA_CHECK(cudaIpcGetMemHandle(&h, device_allocation));
  IpcHandle out;
  std::memcpy(out.data(), &h, kIpcHandleBytes);
  return out;
}

IpcMapping IpcMapping::open(const IpcHandle& handle, int device) {
  set_device(device);
  cudaIpcMemHandle_t h;
  std::memcpy(&h, handle.data(), kIpcHandleBytes);
  IpcMapping m;
  TANDEM_CUDA_CHECK(cudaIpcOpenMemHandle(&m.ptr_, h, cudaIpcMemLazyEnablePeerAccess));
  return m;
}

IpcMapping::~IpcMapping() {
  if (ptr_ != nullptr) cudaIpcCloseMemHandle(ptr_);
}

#else

namespace {
[[noreturn]] void not_built() {
  fail("this build of Tandem has no CUDA support: rebuild where the CUDA toolkit is installed");
}
}  // namespace
DeviceIdentity device_identity(int) { not_built(); }
int device_with_uuid(const std::array<std::uint8_t, 16>&) { return -1; }
bool can_access_peer(int, int) { not_built(); }
void enable_peer_access(int, int) { not_built(); }
IpcHandle ipc_export(void*) { not_built(); }
IpcMapping IpcMapping::open(const IpcHandle&, int) { not_built(); }
IpcMapping::~IpcMapping() = default;

#endif

IpcMapping::IpcMapping(IpcMapping&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)) {}
IpcMapping& IpcMapping::operator=(IpcMapping&& o) noexcept {
  std::swap(ptr_, o.ptr_);
  return *this;
}

}  // namespace tandem::cuda
