// One reader process of `tandem-bench publish`: polls `latest`, leases every new version, copies it
// out (the reader's load: a memcpy, or a D2D into its own GPU buffer for a device slab), checks the verify pattern (--verify), and writes what it saw to a result
// file (JSON) that the writer reads back after the reader exits.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace tandem::bench {

struct ReaderOptions {
  std::string slab, result;
  double seconds = 0;
  bool verify = false;
  int cuda_device = -1;  // >= 0: `slab` is a device slab; map it on this GPU and load each version D2D
};

struct ReaderReport {
  std::uint64_t reads = 0, torn = 0, not_increasing = 0, retries = 0;
  std::vector<double> visible_ms, load_ms;

  void add(const ReaderReport& other);
};

// The reader process's main: reads until the version published with kFinalStep, or seconds + 120 s.
int run_reader(const ReaderOptions& options);

// Starts the reader process (this binary as `publish-reader`); its report goes to options.result.
pid_t spawn_reader(const std::string& exe, const ReaderOptions& options);

// Waits for the reader, fails when it did not exit 0, and returns (and removes) its result file.
ReaderReport collect_reader(pid_t pid, const std::string& result);

}  // namespace tandem::bench
