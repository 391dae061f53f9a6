// Preloading a dataset into its node-wide cache (/tandem.data.<name>), as `tandem data preload` does.
//
// Order of work, and why: (1) the reader plans the load from the input files alone, checking every
// count and size, so bad input fails before any shared memory exists; (2) the segment is created
// (its /dev/shm space reserved up front; an existing name is refused unless `force`); (3) the plan's
// jobs run on `threads` threads, each writing its own byte range of the field arrays; (4) commit
// records the payload checksum and marks the cache ready. Until (4) completes, any exception, and
// SIGINT/SIGTERM/SIGHUP (shm::UnlinkOnSignal), removes the segment: a failed or interrupted preload
// leaves nothing in /dev/shm.
//
// Call from one thread of one process; `progress` is called from the worker threads.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>

#include "datasets/load_plan.hpp"

namespace tandem::data {

// "idx", "cifar10" or "npy", guessed from the files in `dir`; UserError if none fits.
std::string detect_format(const std::filesystem::path& dir);
LoadPlan plan_load(const std::filesystem::path& dir, std::string format);  // "" = detect

struct PreloadOptions {
  std::string name;
  std::filesystem::path from;
  std::string format{};  // "" = detect_format(from)
  bool force = false;
  unsigned threads = 0;  // 0 = hardware concurrency
  // Called by worker threads (concurrently) with the bytes written so far and the total.
  std::function<void(std::uint64_t done, std::uint64_t total)> progress{};
};

struct PreloadResult {
  std::string segment;  // "tandem.data.<name>"
  std::string format;
  std::uint64_t num_samples = 0;
  std::uint64_t payload_bytes = 0;  // sum of the fields' bytes
  std::uint64_t load_ns = 0;
  std::uint64_t checksum = 0;
};

PreloadResult preload(const PreloadOptions& options);

}  // namespace tandem::data
