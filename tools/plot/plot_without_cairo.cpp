// `tandem plot` in a build without cairo: the command exists and says what is missing.
#include "common/error.hpp"
#include "common/cli_actions.hpp"
#include "tools/commands.hpp"

namespace tandem::tools {

void add_plot_commands(CLI::App& app) {
  auto* cmd = app.add_subcommand("plot", "draw a run's curves as a PNG or SVG file (needs cairo; this build has none)");
  cmd->allow_extras();
  cli::on_run(cmd, []() -> int {
    fail(
        "tandem plot: this tandem was built without cairo: install libcairo2-dev and libfontconfig-dev "
        "(./tools/dev/setup does) and rebuild; `tandem dashboard RUN_DIR` shows the same curves in a browser");
  });
}

}  // namespace tandem::tools
