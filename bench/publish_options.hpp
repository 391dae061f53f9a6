// `tandem-bench publish`: how long the learner's publish blocks training, how soon readers see the
// new weights, and how that compares with `{k: v.cpu()}` + load_state_dict (bench/peers/publish_peer.py).
//
// The writer runs in this process (publish_writer.cpp): a source buffer of the chosen size (device
// memory on a GPU, else host memory) published through learner::Publisher into a fresh slab. Readers
// are separate processes (publish_reader.cpp: this binary re-run as the hidden `publish-reader`).
// On a GPU the writer also publishes into a device slab (CUDA IPC) that --device-readers same-GPU
// reader processes follow, and --peer-gpu-readers readers on the other GPUs (GPU to GPU, over NVLink
// where there is one), so every path is measured in one run, next to a plain copy between two GPUs.
// publish_report.cpp prints the table, the peer's comparison and the JSON line.
#pragma once

#include <cstdint>
#include <string>

#include "shm/weight_slab.hpp"

namespace tandem::bench {

// The step of the last publish: readers stop after they read it, and it is not a measurement.
constexpr std::uint64_t kFinalStep = ~0ull;

struct PublishBenchOptions {
  std::string bytes;
  std::string model;
  int readers = 2;
  int device_readers = -1;   // -1: 1 on a GPU, 0 without one
  int peer_gpu_readers = 0;  // device-slab readers on GPUs device + 1, device + 2, ... (mod the GPUs)
  bool chain = false;        // with peer_gpu_readers: a device slab on each of their GPUs too, filled by the chain
  double seconds = 5;
  bool verify = false;
  std::string json;
  bool peer = false;
  bool cpu = false;
  bool copy_in_call = false;  // CPU: the copy inside publish(), as before the copier thread
  int device = 0;
  double interval_ms = -1;  // -1: auto (1.5 x one copy, at least 5 ms)
  std::uint32_t slots = shm::kDefaultSlots;
  std::string python = "python3";
  std::string peer_script;
};

// What is published: flat bytes of the model, and a tensor count for the peer's state_dict.
struct ModelSize {
  std::uint64_t bytes;
  int tensors;
  const char* what;
  const char* peer_shape = "flat";  // publish_peer.py --shape: the peer's tensors' shapes
};

// --bytes, or one of the built-in --model sizes; fails naming the option when neither parses.
ModelSize model_size(const PublishBenchOptions& options);

}  // namespace tandem::bench
