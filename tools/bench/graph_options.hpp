// `tandem-bench graph`: the single-GPU supervised training step and the evaluation forward of the
// cnn and ResNet-18 (CIFAR-shaped 3x32x32 synthetic data already on the GPU, SGD Nesterov), eager
// against replayed from a CUDA graph (learner/graph_step.hpp, actor/graph_eval.hpp), at batch 128
// and 512: the median of --steps CUDA-event-timed steps after --warmup. With --peer, the same in
// PyTorch (bench/peers/graph_step_peer.py: eager and torch.compile reduce-overhead) in the same run,
// and the ratio ours-with-graphs / PyTorch eager (goal: <= 0.7 at batch 128).
#pragma once

#include <cstdint>
#include <string>

namespace tandem::bench {

struct GraphBenchOptions {
  std::string models = "cnn,resnet18";
  std::string batches = "128,512";
  int steps = 100;
  int warmup = 20;
  std::string json;
  bool peer = false;
  std::string python = "python3";
  std::string peer_script;
  std::uint32_t device = 0;
};

// Runs the bench and returns the exit code (graph_bench.cpp where LibTorch is found, else
// bench_without_torch.cpp). Without a visible GPU, or LibTorch without CUDA, a UserError saying it
// needs one.
int bench_graph(const GraphBenchOptions& options);

}  // namespace tandem::bench
