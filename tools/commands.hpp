// Command families of `tandem`. Each add_*_commands registers subcommands and the action each runs;
// run_selected() runs the action of whichever subcommand CLI11 parsed (tandem-bench uses these two
// as well).
#pragma once

#include <CLI/CLI.hpp>

#include <functional>

namespace tandem::tools {

// Registers `action` as what `sub` does; the action returns the process exit code.
void on_run(CLI::App* sub, std::function<int()> action);
int run_selected(CLI::App& app);

void add_shm_commands(CLI::App& app);
void add_data_commands(CLI::App& app);
void add_run_commands(CLI::App& app);  // tools/run/run_cmd.cpp
void add_status_commands(CLI::App& app);
void add_dashboard_commands(CLI::App& app);  // tools/dashboard/dashboard_cmd.cpp
void add_plot_commands(CLI::App& app);       // tools/plot/plot_cmd.cpp

// `tandem bench ...` runs tandem-bench (tools/bench/) with the same arguments.
void add_bench_commands(CLI::App& app);

}  // namespace tandem::tools
