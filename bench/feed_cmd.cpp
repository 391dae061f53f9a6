#include "bench/bench_commands.hpp"
#include "bench/feed_options.hpp"
#include "common/cli_actions.hpp"

namespace tandem::bench {

void add_feed_command(CLI::App& app) {
  static FeedBenchOptions o;
  auto* cmd = app.add_subcommand("feed", "samples/s and GB/s of HostFeed and DeviceFeed at batch 256/512/1024");
  cmd->add_option("--dataset", o.dataset, "a preloaded dataset cache (default: 50000 synthetic 3x32x32 uint8 samples)");
  cmd->add_option("--split", o.split, "split to read")->capture_default_str();
  cmd->add_option("--seconds", o.seconds, "seconds per measurement")->capture_default_str();
  cmd->add_option("--json", o.json, "also write the JSON line to this file");
  cmd->add_flag("--peer", o.peer, "also run the PyTorch peers (bench/peers/feed_peer.py) and print ours/peer ratios");
  cmd->add_option("--python", o.python, "Python with torch, for --peer")->capture_default_str();
  cmd->add_option("--peer-script", o.peer_script, "path of feed_peer.py (default: found in the source tree)");
  cmd->add_option("--workers", o.workers, "HostFeed gather threads (0: min(8, cores))")->capture_default_str();
  cmd->add_option("--ring-slots", o.ring_slots, "HostFeed staging slots")->capture_default_str();
  cmd->add_option("--device", o.device, "GPU index")->capture_default_str();
  cli::on_run(cmd, [] { return bench_feed(o); });
}

}  // namespace tandem::bench
