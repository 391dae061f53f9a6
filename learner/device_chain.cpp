#include "learner/device_chain.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "common/cuda_ipc.hpp"
#include "common/error.hpp"


namespace tandem::learner {
namespace {
// Chunks small enough that a 4-hop chain adds little after the first copy (1/64 of it per hop), large
// enough that a copy's fixed cost (a few microseconds) stays under 1 % of it.
constexpr std::size_t kChunks = 64;
constexpr std::size_t kMinChunkBytes = std::size_t{8} << 20;
constexpr std::size_t kChunkAlign = 256;
}  // namespace

OwnedDeviceSlab OwnedDeviceSlab::create(const std::string& name, const shm::SlabSpec& spec, int device) {
  OwnedDeviceSlab slab;
  slab.device = device;
  cuda::set_device(device);
  slab.memory = cuda::Buffer::allocate(cuda::Buffer::Kind::device, shm::WeightSlabWriter::device_slab_bytes(spec));
  shm::DeviceSlabInfo info{};
  const cuda::IpcHandle handle = cuda::ipc_export(slab.memory.data());
  std::memcpy(info.ipc_handle, handle.data(), handle.size());
  const cuda::DeviceIdentity id = cuda::device_identity(device);
  std::memcpy(info.gpu_uuid, id.uuid.data(), id.uuid.size());
  std::snprintf(info.pci_bus_id, sizeof info.pci_bus_id, "%s", id.pci_bus_id.c_str());
  info.buffer_bytes = slab.memory.size();
  info.exporter_pid = static_cast<std::uint64_t>(::getpid());
  slab.writer = shm::WeightSlabWriter::create_on_device(name, spec, info, static_cast<std::byte*>(slab.memory.data()));
  return slab;
}

DeviceChain::DeviceChain(std::vector<int> devices, std::size_t bytes) : devices_(std::move(devices)), bytes_(bytes) {
  if (devices_.empty() || bytes_ == 0) throw std::logic_error("DeviceChain: needs a source GPU and bytes to copy");
  // Chunks pay only where a next hop can start on one while the last is still copying.
  chunk_ = devices_.size() == 1 ? bytes_ : std::max(kMinChunkBytes, (bytes_ + kChunks - 1) / kChunks);
  chunk_ = (chunk_ + kChunkAlign - 1) / kChunkAlign * kChunkAlign;
  const std::size_t chunks = (bytes_ + chunk_ - 1) / chunk_;
  // Hop h may copy from any earlier hop (when the ones between are left out), driven from the GPU
  // before it.
  for (std::size_t h = 1; h < devices_.size(); ++h)
    for (std::size_t from = 0; from < h; ++from) {
      cuda::enable_peer_access(devices_[h], devices_[from]);
      cuda::enable_peer_access(devices_[h - 1], devices_[from]);
      cuda::enable_peer_access(devices_[h - 1], devices_[h]);
    }
  for (std::size_t h = 0; h < devices_.size(); ++h) {
    const int driver = stream_device(h);
    cuda::set_device(driver);
    streams_.push_back(cuda::Stream::create(driver));
    std::vector<cuda::Event> events;
    for (std::size_t c = 0; c < chunks; ++c) events.push_back(cuda::Event::create(false));
    chunk_done_.push_back(std::move(events));
    start_.push_back(cuda::Event::create(true));
    done_.push_back(cuda::Event::create(true));
  }
  cuda::set_device(devices_[0]);
}

// A copy between two GPUs runs on the stream of the one it reads (a push over NVLink): hop h > 0 on
// devices[h - 1], hop 0 within devices[0].
int DeviceChain::stream_device(std::size_t hop) const { return devices_[hop == 0 ? 0 : hop - 1]; }

void DeviceChain::enqueue(const void* src, const SourceReady& ready, const std::vector<std::byte*>& dst) {
  if (dst.size() != devices_.size()) throw std::logic_error("DeviceChain::enqueue: one destination per hop");
  if (ready.pieces.empty() || ready.piece_bytes == 0) throw std::logic_error("DeviceChain::enqueue: no ready events");
  for (std::size_t h = 0; h < devices_.size(); ++h) {
    if (dst[h] == nullptr) continue;
    cuda::set_device(stream_device(h));
    streams_[h].wait(ready.pieces.front());
    start_[h].record(streams_[h].get());
  }
  // Chunk-major, so that every hop's stream has work queued as soon as its first chunk can move. The
  // first hop present waits for the source piece that holds each chunk's last byte.
  std::size_t waited_piece = 0;
  for (std::size_t c = 0, offset = 0; offset < bytes_; ++c, offset += chunk_) {
    const std::size_t len = std::min(chunk_, bytes_ - offset);
    const std::size_t piece = std::min((offset + len - 1) / ready.piece_bytes, ready.pieces.size() - 1);
    const std::byte* from = static_cast<const std::byte*>(src);
    std::ptrdiff_t previous = -1;  // the hop this one reads; -1: the source
    for (std::size_t h = 0; h < devices_.size(); ++h) {
      if (dst[h] == nullptr) continue;
      cuda::set_device(stream_device(h));
      if (previous >= 0) {
        streams_[h].wait(chunk_done_[previous][c].get());
      } else if (piece > waited_piece) {
        streams_[h].wait(ready.pieces[piece]);
        waited_piece = piece;
      }
      cuda::copy_async(dst[h] + offset, from + offset, len, streams_[h].get());
      chunk_done_[h][c].record(streams_[h].get());
      from = dst[h];
      previous = static_cast<std::ptrdiff_t>(h);
    }
  }
  for (std::size_t h = 0; h < devices_.size(); ++h) {
    if (dst[h] == nullptr) continue;
    cuda::set_device(stream_device(h));
    done_[h].record(streams_[h].get());
  }
  cuda::set_device(devices_[0]);
}

}  // namespace tandem::learner
