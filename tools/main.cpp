// tandem: the user's command. Each command family lives in its own file and registers itself here.
#include <CLI/CLI.hpp>

#include "common/error.hpp"
#include "common/cli_actions.hpp"
#include "tools/commands.hpp"

int main(int argc, char** argv) {
  CLI::App app{"Tandem: a multi-process actor-learner runtime", "tandem"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "tandem 0.1.0");
  tandem::tools::add_shm_commands(app);
  tandem::tools::add_data_commands(app);
  tandem::tools::add_bench_commands(app);
  tandem::tools::add_run_commands(app);
  tandem::tools::add_status_commands(app);
  tandem::tools::add_dashboard_commands(app);
  tandem::tools::add_plot_commands(app);
  CLI11_PARSE(app, argc, argv);
  return tandem::run_main("tandem", [&] { return tandem::cli::run_selected(app); });
}
