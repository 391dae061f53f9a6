// tandem-bench: the benchmarks of Tandem's hot paths, each against the baseline a PyTorch user would
// otherwise write (bench/peers/). Each prints a table and one JSON line (--json FILE writes it too).
// A program of its own because the feeds need LibTorch and the `tandem` launcher must not load it;
// `tandem bench ...` runs this program.
#include <CLI/CLI.hpp>

#include "common/error.hpp"
#include "bench/bench_commands.hpp"
#include "common/cli_actions.hpp"

int main(int argc, char** argv) {
  CLI::App app{"tandem-bench: Tandem's hot paths measured against their PyTorch peers", "tandem-bench"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "tandem-bench 0.1.0");
  tandem::bench::add_feed_command(app);
  tandem::bench::add_publish_commands(app);
  tandem::bench::add_ddp_command(app);
  tandem::bench::add_rollout_command(app);
  tandem::bench::add_graph_command(app);
  tandem::bench::add_block_command(app);
  tandem::bench::add_python_command(app);
  tandem::bench::add_mujoco_command(app);
  CLI11_PARSE(app, argc, argv);
  return tandem::run_main("tandem-bench", [&] { return tandem::cli::run_selected(app); });
}
