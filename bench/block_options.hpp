// `tandem-bench block`: the cnn's BatchNorm -> ReLU -> 2x2 max-pool blocks on the CPU at their
// training shapes (batch 128: 16x28x28 and 32x14x14), forward and forward+backward: the fused op
// (common/torch/builtin_nets/fused_bn_relu_pool.hpp, each kernel build this CPU runs) against the three ATen ops a
// PyTorch user runs, on channels-last and on NCHW activations (what the cnn ran before). Median of
// --steps timed calls after --warmup, --threads intra-op threads.
#pragma once

#include <string>

namespace tandem::bench {

struct BlockBenchOptions {
  int batch = 128;
  int steps = 200;
  int warmup = 20;
  int threads = 1;
  std::string json;
};

// Runs the bench and returns the exit code (block_bench.cpp where LibTorch is found, else
// bench_without_torch.cpp: a UserError saying how to get it).
int bench_block(const BlockBenchOptions& options);

}  // namespace tandem::bench
