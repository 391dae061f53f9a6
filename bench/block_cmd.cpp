#include "bench/bench_commands.hpp"
#include "bench/block_options.hpp"
#include "common/cli_actions.hpp"

namespace tandem::bench {

void add_block_command(CLI::App& app) {
  static BlockBenchOptions o;
  auto* cmd = app.add_subcommand("block", "the cnn's BatchNorm-ReLU-maxpool blocks on the CPU: fused vs the ATen ops");
  cmd->add_option("--batch", o.batch, "samples per call")->capture_default_str()->check(CLI::Range(2, 65536));
  cmd->add_option("--steps", o.steps, "timed calls per measurement (the median is reported)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  cmd->add_option("--warmup", o.warmup, "untimed calls first")->capture_default_str()->check(CLI::Range(0, 1000000));
  cmd->add_option("--threads", o.threads, "LibTorch intra-op threads")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  cmd->add_option("--json", o.json, "also write the JSON line to this file");
  cli::on_run(cmd, [] { return bench_block(o); });
}

}  // namespace tandem::bench
