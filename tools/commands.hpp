// Command families of `tandem`. Each add_*_commands registers its subcommands and the action each
// runs (common/cli_actions.hpp); main.cpp runs whichever CLI11 parsed.
#pragma once

#include <CLI/CLI.hpp>

namespace tandem::tools {

void add_shm_commands(CLI::App& app);
void add_data_commands(CLI::App& app);
void add_run_commands(CLI::App& app);  // tools/run/run_cmd.cpp
void add_status_commands(CLI::App& app);
void add_dashboard_commands(CLI::App& app);  // tools/run/dashboard_cmd.cpp
void add_plot_commands(CLI::App& app);       // tools/plot/plot_cmd.cpp

// `tandem bench ...` runs tandem-bench (bench/) with the same arguments.
void add_bench_commands(CLI::App& app);

}  // namespace tandem::tools
