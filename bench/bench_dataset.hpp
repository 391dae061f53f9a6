// The dataset a LibTorch bench reads: the cache named by --dataset, or, without one, a synthetic
// CIFAR-shaped cache made for this run (50000 samples of 3x32x32) and unlinked when the bench ends
// or is interrupted. Constructed once on the bench's thread; not copied or moved (it owns the segment).
#pragma once

#include <fmt/format.h>
#include <unistd.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "learner/feed/synthetic_dataset.hpp"
#include "shm/dataset_cache.hpp"
#include "shm/segment.hpp"

namespace tandem::bench {

struct BenchDataset {
  static constexpr std::uint64_t kSyntheticSamples = 50000;

  // bench: names the synthetic cache, bench-<bench>-<pid>.
  BenchDataset(const std::string& requested, std::string_view bench) : name(requested) {
    if (!name.empty()) return;
    name = fmt::format("bench-{}-{}", bench, ::getpid());
    on_signal.emplace(shm::dataset_segment_name(name));
    synthetic.emplace(name, kSyntheticSamples, 0, std::vector<std::uint64_t>{3, 32, 32});
  }
  BenchDataset(const BenchDataset&) = delete;
  BenchDataset& operator=(const BenchDataset&) = delete;

  std::string name;
  std::optional<shm::UnlinkOnSignal> on_signal;  // declared first: it outlives the segment it guards
  std::optional<feed::SyntheticDataset> synthetic;
};

}  // namespace tandem::bench
