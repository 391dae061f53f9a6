// `tandem-bench feed`: samples/s and GB/s of HostFeed and DeviceFeed at batch sizes 256/512/1024, on
// CIFAR-shaped synthetic uint8 samples (a temporary dataset cache, removed at exit) or on a preloaded
// cache; with --peer, the PyTorch baselines (bench/peers/feed_peer.py) in the same run over the same
// cache, and the ratio table.
#pragma once

#include <cstdint>
#include <string>

namespace tandem::bench {

struct FeedBenchOptions {
  std::string dataset;  // empty: synthetic CIFAR-shaped samples
  std::string split = "train";
  double seconds = 2.0;
  std::string json;
  bool peer = false;
  std::string python = "python3";
  std::string peer_script;
  unsigned workers = 0;
  unsigned ring_slots = 4;
  std::uint32_t device = 0;
};

// Runs the bench and returns the exit code. Built from feed_bench.cpp where LibTorch is found, else
// from bench_without_torch.cpp, which says how to get it.
int bench_feed(const FeedBenchOptions& options);

}  // namespace tandem::bench
