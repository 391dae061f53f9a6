#include "bench/bench_commands.hpp"
#include "bench/python_options.hpp"
#include "common/cli_actions.hpp"

namespace tandem::bench {

void add_python_command(CLI::App& app) {
  static PythonBenchOptions o;
  auto* cmd = app.add_subcommand("python", "the `tandem` Python package's feeds and publish against the C++ ones");
  cmd->add_option("--dataset", o.dataset, "a preloaded dataset cache (default: 50000 synthetic 3x32x32 uint8 samples)");
  cmd->add_option("--split", o.split, "split to read")->capture_default_str();
  cmd->add_option("--seconds", o.seconds, "seconds per feed measurement")->capture_default_str();
  cmd->add_option("--rounds", o.rounds, "C++/Python feed rounds (the best of each kept)")->capture_default_str();
  cmd->add_option("--bytes", o.bytes, "publish model bytes (K/M/G: powers of 1024; 0: no publish)")
      ->capture_default_str();
  cmd->add_option("--tensors", o.tensors, "float32 tensors of the publish model")->capture_default_str();
  cmd->add_option("--reps", o.reps, "publishes measured on each side")->capture_default_str();
  cmd->add_option("--json", o.json, "also write the JSON line to this file");
  cmd->add_flag("--peer", o.peer, "also run bench/peers/feed_peer.py and publish_peer.py and print the ratios");
  cmd->add_option("--python", o.python, "Python with torch, for the package and the peers")->capture_default_str();
  cmd->add_option("--script", o.script, "path of bench/python/python_side.py (default: found in the source tree)");
  cmd->add_option("--workers", o.workers, "HostFeed gather threads (0: min(8, cores))")->capture_default_str();
  cmd->add_option("--ring-slots", o.ring_slots, "HostFeed staging slots")->capture_default_str();
  cmd->add_option("--device", o.device, "GPU index")->capture_default_str();
  cli::on_run(cmd, [] { return bench_python(o); });
}

}  // namespace tandem::bench
