#include "bench/bench_commands.hpp"
#include "bench/graph_options.hpp"
#include "common/cli_actions.hpp"

namespace tandem::bench {

void add_graph_command(CLI::App& app) {
  static GraphBenchOptions o;
  auto* cmd = app.add_subcommand(
      "graph", "training step and evaluation forward: eager vs CUDA graph (cnn, resnet18; batch 128/512; fp32/bf16)");
  cmd->add_option("--models", o.models, "comma-separated built-in models")->capture_default_str();
  cmd->add_option("--batches", o.batches, "comma-separated batch sizes")->capture_default_str();
  cmd->add_option("--precisions", o.precisions, "comma-separated: fp32, bf16")->capture_default_str();
  cmd->add_option("--steps", o.steps, "timed steps per measurement (the median is reported)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  cmd->add_option("--warmup", o.warmup, "untimed steps first")->capture_default_str()->check(CLI::Range(0, 1000000));
  cmd->add_option("--json", o.json, "also write the JSON line to this file");
  cmd->add_option("--bn-backend", o.bn_backend,
                  "the fused BatchNorm's kernels: auto (cuDNN from 64 channels), tandem or cudnn")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "tandem", "cudnn"}));
  cmd->add_option("--cudnn-benchmark-limit", o.cudnn_benchmark_limit,
                  "cuDNN plans timed per convolution, ours and the peer's (0: all; default: ATen's 10)")
      ->check(CLI::Range(0, 1000000));
  cmd->add_flag("--profile", o.profile, "print the costliest kernels of each graphed training step and evaluation");
  cmd->add_option("--profile-rows", o.profile_rows, "how many kernels --profile prints per step")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  cmd->add_flag("--profile-sequence", o.profile_sequence,
                "with --profile, also print every kernel of one step in launch order (start and duration)");
  cmd->add_flag("--peer", o.peer,
                "also run the PyTorch peer (bench/peers/graph_step_peer.py) and print ours/peer ratios");
  cmd->add_option("--python", o.python, "Python with torch, for --peer")->capture_default_str();
  cmd->add_option("--peer-script", o.peer_script, "path of graph_step_peer.py (default: found in the source tree)");
  cmd->add_option("--device", o.device, "GPU index")->capture_default_str();
  cli::on_run(cmd, [] { return bench_graph(o); });
}

}  // namespace tandem::bench
