// The GPU kernels one call of a function launches, through LibTorch's Kineto profiler (CUPTI): for
// `tandem-bench graph --profile`, to see where a step's time goes.
//
//   KernelProfile p = profile_kernels([&] { step.step(); }, 10);   // 10 calls, after one unprofiled call
//   p.print(stdout, 20);                                          // the 20 costliest kernel names
//
// Kernels are grouped by name (template arguments dropped); times are per call. CUDA builds with
// LibTorch 2.x only; elsewhere profile_kernels throws a UserError saying so.
#pragma once

#include <cstdio>
#include <functional>
#include <string>
#include <vector>

namespace tandem::bench {

struct KernelRow {
  std::string name;
  double ms_per_call = 0;
  double launches_per_call = 0;
};

struct KernelProfile {
  std::vector<KernelRow> rows;  // costliest first
  double busy_ms_per_call = 0;  // the kernels' summed time per call
  double launches_per_call = 0;
  void print(std::FILE* out, std::size_t top) const;
};

KernelProfile profile_kernels(const std::function<void()>& call, int calls);

}  // namespace tandem::bench
