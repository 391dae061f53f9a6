// Command families of `tandem`. Each add_*_commands registers subcommands and the action each runs;
// run_selected() runs the action of whichever subcommand CLI11 parsed.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>

namespace tandem::tools {

// Registers `action` as what `sub` does; the action returns the process exit code.
void on_run(CLI::App* sub, std::function<int()> action);
int run_selected(CLI::App& app);

void add_shm_commands(CLI::App& app);
void add_data_commands(CLI::App& app);
void add_run_commands(CLI::App& app);     // tools/run/run_cmd.cpp
void add_status_commands(CLI::App& app);

// `tandem bench <thing>`: add_bench_commands creates the group and calls each add_bench_*_command.
void add_bench_commands(CLI::App& app);
void add_bench_feed_command(CLI::App& bench);

// `tandem bench <thing>`: add_bench_commands creates the group and calls each bench's add function.
void add_bench_commands(CLI::App& app);
void add_bench_publish(CLI::App& bench);

}  // namespace tandem::tools
