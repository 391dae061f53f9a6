// CUDA IPC for device memory shared between processes of one node (the device weight slab,
// shm/weight_slab.hpp): which GPU a device is, which GPU of ours has a given identity and whether one
// can read another's memory directly (peer access: NVLink or PCIe), exporting an allocation, and
// mapping one exported by another process, on its GPU or on a peer of it. Torch-free and header-light like common/cuda.hpp; without CUDA every call throws
// the same UserError as constructing a cuda.hpp handle.
//
// Contract
//  * Export: the memory must be a cudaMalloc allocation's base (an IPC handle names the whole
//    allocation; cudaIpcOpenMemHandle returns its base). The exporter keeps it alive while anyone may map it.
//  * IpcMapping: move-only; opened by any thread of a process other than the exporter (CUDA refuses
//    the exporter itself), closed with cudaIpcCloseMemHandle on destruction. The importer reads
//    through it; who may write what is the slab's seqlock and lease protocol, not this file's.
#pragma once

#include <array>
#include <cstdint>
#include <string>

namespace tandem::cuda {

inline constexpr std::size_t kIpcHandleBytes = 64;  // sizeof(cudaIpcMemHandle_t)
using IpcHandle = std::array<std::uint8_t, kIpcHandleBytes>;

struct DeviceIdentity {
  std::array<std::uint8_t, 16> uuid{};  // cudaDeviceProp::uuid: the same GPU in every process
  std::string pci_bus_id;               // "0000:19:00.0"
};
DeviceIdentity device_identity(int device);
// The device of this process whose uuid is `uuid`; -1 when none is (another node's GPU, or hidden by
// CUDA_VISIBLE_DEVICES).
int device_with_uuid(const std::array<std::uint8_t, 16>& uuid);
// Whether kernels and copies on `device` can read `peer`'s memory directly.
bool can_access_peer(int device, int peer);
// Lets `device`'s copies and kernels reach `peer`'s allocations directly (NVLink, PCIe), as an IPC
// mapping with lazy peer access does; a no-op where it already may. UserError where it cannot.
void enable_peer_access(int device, int peer);

IpcHandle ipc_export(void* device_allocation);

class IpcMapping {
 public:
  IpcMapping() = default;
  static IpcMapping open(const IpcHandle& handle, int device);
  IpcMapping(IpcMapping&& o) noexcept;
  IpcMapping& operator=(IpcMapping&& o) noexcept;
  ~IpcMapping();
  void* data() const { return ptr_; }

 private:
  void* ptr_ = nullptr;
};

}  // namespace tandem::cuda
