// The writer side of `tandem-bench publish` (see publish_options.hpp): creates the slab, starts the
// readers, publishes at a fixed interval for the chosen time, and gathers what everyone measured.
#pragma once

#include <cstdint>
#include <vector>

#include "bench/publish_options.hpp"
#include "bench/publish_reader.hpp"

namespace tandem::bench {

struct PublishMeasurement {
  bool gpu = false;
  std::uint64_t bytes = 0;  // published each time
  double interval_ms = 0;
  double pinned_gbps = 0;                              // a plain D2H into cudaHostAlloc'd memory, best of 3 (GPU only)
  std::vector<double> call_us;                         // publish() on the training thread
  std::vector<double> fence_us;                        // CPU: wait_before_update() before the next fill
  std::vector<double> snapshot_ms, d2h_ms, commit_ms;  // per committed version, from the publisher
  std::uint64_t calls = 0, coalesced = 0, skipped = 0;
  ReaderReport readers;  // every reader's, together
  // The device slab (GPU only, with device readers): D2D into its slot, publish() -> committed there,
  // and its same-GPU readers' reports.
  int device_readers = 0;
  std::vector<double> device_copy_ms, device_commit_ms;
  std::uint64_t device_skipped = 0;
  ReaderReport device;
  // Device-slab readers on other GPUs, and the reference: one plain copy of the model's bytes from
  // the publishing GPU to the next one, best of 3.
  int peer_readers = 0;
  double peer_gbps = 0;
  ReaderReport peer;
  // --chain: device slabs on the peer readers' GPUs too; publish() -> committed on all of them, and
  // the chain's GPU time from the snapshot to the last GPU's copy.
  int chain_gpus = 0;
  std::vector<double> peers_copy_ms, peers_commit_ms;
};

PublishMeasurement measure_publish(const PublishBenchOptions& options, const ModelSize& size);

}  // namespace tandem::bench
