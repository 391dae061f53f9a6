// The GPU kernels one call of a function launches, through LibTorch's Kineto profiler (CUPTI): for
// `tandem-bench graph --profile`, to see where a step's time goes.
//
//   KernelProfile p = profile_kernels([&] { step.step(); }, 10);   // 10 calls, after one unprofiled call
//   p.print(stdout, 20);                                          // the 20 costliest kernel names
//   p.print_sequence(stdout);                                     // every launch of one call, in order
//
// Kernels are grouped by name (template arguments dropped); times are per call. The sequence is
// each launch's time averaged over the calls at its place in the call (a graph replay launches the
// same kernels in the same order every time): it tells apart the 20 BatchNorms that share one name.
// CUDA builds with LibTorch 2.x only; elsewhere profile_kernels throws a UserError saying so.
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
  std::vector<KernelRow> rows;      // costliest first
  std::vector<KernelRow> sequence;  // one call's launches in order; empty if the calls differed
  double busy_ms_per_call = 0;      // the kernels' summed time per call
  double launches_per_call = 0;
  void print(std::FILE* out, std::size_t top) const;
  void print_sequence(std::FILE* out) const;
};

KernelProfile profile_kernels(const std::function<void()>& call, int calls);

}  // namespace tandem::bench
