// Subcommands that run an action: `tandem`, `tandem-bench` and the Python package's test peer each
// register what every leaf subcommand does with on_run(), and run_selected() runs the one CLI11
// parsed. Threads: the program's main thread, before and after parsing.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>

namespace tandem::cli {

// Registers `action` as what `sub` does; the action returns the process exit code.
void on_run(CLI::App* sub, std::function<int()> action);
// Runs the action of the leaf subcommand that was parsed; prints the help and returns 2 when none was.
int run_selected(CLI::App& app);

}  // namespace tandem::cli
