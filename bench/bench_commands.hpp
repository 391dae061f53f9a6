// The subcommands of tandem-bench, one family per bench; each registers its action with on_run
// (common/cli_actions.hpp).
#pragma once

#include <CLI/CLI.hpp>

namespace tandem::bench {

void add_feed_command(CLI::App& app);      // feed_cmd.cpp
void add_publish_commands(CLI::App& app);  // publish_cmd.cpp: publish and the hidden publish-reader
void add_ddp_command(CLI::App& app);       // ddp_cmd.cpp
void add_rollout_command(CLI::App& app);   // rollout_cmd.cpp
void add_graph_command(CLI::App& app);     // graph_cmd.cpp
void add_block_command(CLI::App& app);     // block_cmd.cpp
void add_python_command(CLI::App& app);    // python_cmd.cpp
void add_mujoco_command(CLI::App& app);    // mujoco_cmd.cpp

}  // namespace tandem::bench
