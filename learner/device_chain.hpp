// The learner's device slabs: one per GPU that follows its weights, each in GPU memory the learner
// owns and exports (CUDA IPC), and the chain that fills them GPU to GPU without host memory.
//
// Why a chain: copying the weights from the learner's GPU to N others one after another costs N copies
// on the first GPU's links. A chain 0 -> 1 -> 2 -> 3 in chunks keeps every link busy at once: chunk c
// moves 1 -> 2 while chunk c + 1 moves 0 -> 1, so the last GPU holds the image about one copy's time
// (bytes / link bandwidth) plus one chunk per further hop after the first GPU started.
//
// Contract
//  * OwnedDeviceSlab: the GPU memory of one device slab and its writer; the writer (and with it the
//    segment's name) goes first on destruction, then the memory. Move-only; one thread at a time.
//  * DeviceChain: hop 0 is a copy within devices[0] (the source GPU: its staging buffer into the source
//    GPU's own device slot); hop h > 0 copies from the nearest earlier hop present in the transfer into
//    devices[h]. A hop whose slab had no free slot is left out (dst null) and the next hop reads from
//    the one before it. Each hop runs on its own stream, on the GPU it reads (a push); chunk c of hop h
//    waits for chunk c of the hop it reads (one event per chunk and hop), and the first hop waits for
//    the source in pieces (SourceReady), so the chain can start before the whole snapshot is taken.
//  * One thread (the publisher's committer or training thread) calls enqueue() and reads the events;
//    one transfer at a time: enqueue() again only once every present hop's done() has completed (the
//    events are reused).
//  * The constructor enables peer access between each pair of hops that may copy (a UserError names
//    the pair without a direct path: such a copy would go through host memory).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "common/cuda.hpp"
#include "shm/weight_slab.hpp"

namespace tandem::learner {

struct OwnedDeviceSlab {
  cuda::Buffer memory;  // declared first: destroyed after the writer
  shm::WeightSlabWriter writer;
  int device = -1;
  // cudaMalloc's every slot of `spec` on `device` in one allocation (an IPC handle names a whole
  // allocation) and creates device slab `name` over it, exported for readers on the node.
  static OwnedDeviceSlab create(const std::string& name, const shm::SlabSpec& spec, int device);
};

class DeviceChain {
 public:
  DeviceChain() = default;
  DeviceChain(std::vector<int> devices, std::size_t bytes);
  DeviceChain(DeviceChain&&) noexcept = default;
  DeviceChain& operator=(DeviceChain&&) noexcept = default;

  // When the source may be read: piece i, bytes [i * piece_bytes, (i + 1) * piece_bytes), once
  // pieces[i] (an event of devices[0]) has completed; the last piece runs to the end.
  struct SourceReady {
    std::vector<cuda::EventHandle> pieces;
    std::size_t piece_bytes = 0;
  };
  // src: `bytes` on devices[0]. dst[h]: a slot on devices[h], or null to leave hop h out.
  void enqueue(const void* src, const SourceReady& ready, const std::vector<std::byte*>& dst);
  const cuda::Event& done(std::size_t hop) const { return done_[hop]; }
  // GPU time from the source's first piece to hop h's last chunk.
  double elapsed_ms(std::size_t hop) const { return cuda::Event::elapsed_ms(start_[hop], done_[hop]); }
  std::size_t chunk_bytes() const { return chunk_; }

 private:
  int stream_device(std::size_t hop) const;

  std::vector<int> devices_;
  std::size_t bytes_ = 0, chunk_ = 0;
  std::vector<cuda::Stream> streams_;                 // one per hop, on stream_device(hop)
  std::vector<std::vector<cuda::Event>> chunk_done_;  // [hop][chunk], no timing
  std::vector<cuda::Event> start_, done_;             // [hop]: `ready`, its last chunk; timing
};

}  // namespace tandem::learner
