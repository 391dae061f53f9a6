// `tandem-bench graph`: the single-GPU supervised training step and the evaluation forward of the
// cnn and ResNet-18 (CIFAR-shaped 3x32x32 synthetic data already on the GPU, SGD Nesterov), eager
// against replayed from a CUDA graph (learner/captured_train_step.hpp, actor/graph_eval.hpp: fused BatchNorm,
// fused optimizer, folded evaluation), at batch 128 and 512, in float32 and bf16 (Model::set_precision),
// the median of --steps CUDA-event-timed steps after --warmup. With --peer, the same in PyTorch
// (bench/peers/graph_step_peer.py: eager and torch.compile(mode="reduce-overhead"), under
// torch.autocast for bf16) in the same run, and the ratios ours-with-graphs / theirs against the
// targets (ResNet-18 training <= 0.9x compile at 128 and <= 0.8x at 512, cnn training <= 0.9x
// at 512, evaluation <= 0.8x).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace tandem::bench {

struct GraphBenchOptions {
  std::string models = "cnn,resnet18";
  std::string batches = "128,512";
  std::string precisions = "fp32,bf16";
  int steps = 100;
  int warmup = 20;
  std::string json;
  // How many of cuDNN's plans its benchmark mode times per convolution, ours and the peer's alike
  // (ATen's benchmark_limit; 0: every plan). Unset: ATen's default, 10.
  std::optional<int> cudnn_benchmark_limit;
  std::string bn_backend = "auto";  // the fused BatchNorm's kernels: auto, tandem or cudnn (bn_act.hpp)
  bool profile = false;             // also print each graphed step's costliest kernels (kernel_profile.hpp)
  int profile_rows = 25;            // ... this many of them
  bool profile_sequence = false;    // ... and every launch of one step in order
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
