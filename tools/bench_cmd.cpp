// tandem bench: the benchmarks of Tandem's hot paths, each against the baseline a PyTorch user would
// otherwise use (bench/peers/). Each bench lives in its own tools/bench_<thing>_cmd.cpp and is added
// to the group here; each prints a table and one JSON line (--json FILE writes it too).
#include "tools/commands.hpp"

namespace tandem::tools {

void add_bench_commands(CLI::App& app) {
  auto* bench = app.add_subcommand("bench", "measure Tandem's hot paths against their PyTorch peers");
  bench->require_subcommand(1);
  add_bench_feed_command(*bench);
  add_bench_publish(*bench);
}

}  // namespace tandem::tools
