// What tandem-learner and tandem-actor do the same way at start: the command line
// `PROGRAM [config.toml] [--set key=value ...]`, loading the job's settings (common/settings/job.hpp)
// with the rules the launcher checked, and turning SIGINT/SIGTERM into a stop request instead of a
// death.
//
// Threads: call everything from main's thread before starting others. stop_signal() may be read from
// any thread; it is a relaxed atomic load, set by the signal handler (only the value matters, it
// publishes nothing else).
#pragma once

#include <span>
#include <string>
#include <vector>

#include "common/config.hpp"
#include "common/settings/job.hpp"

namespace CLI {
class App;
}

namespace tandem {

struct ProgramArgs {
  std::string file;
  std::vector<std::string> overrides;
};
void add_program_args(CLI::App& app, ProgramArgs& args);

// The config file: the command line's config argument, else $TANDEM_CONFIG (set by `tandem run`), else
// the defaults. `overrides` are "key=value" strings (--set). The launcher's [run] table (and --set
// run.*) is ignored with a one-line note on stderr, so a job config can be given by hand; so is each
// former key spelling used (renamed_keys()).
Config load_program_config(const std::string& file, std::span<const std::string> overrides);

// The job's shape as `tandem run` set it for this program (TANDEM_ACTORS, TANDEM_DETERMINISTIC; no
// actor count when started by hand), with the learner ranks the caller knows of.
JobShape program_shape(std::uint32_t learners, std::uint32_t local_learners);

// From now on SIGINT and SIGTERM set stop_signal() instead of ending the process; the program polls
// it between units of work (a step, a batch) and stops cleanly.
void catch_stop_signals();
// The last stop signal received, or 0.
int stop_signal();

// Keeps the memory a loop frees for the next turn of the loop. A training or rollout step frees and
// reallocates the same tensors every step; glibc's defaults hand freed blocks above its trim and
// mmap thresholds back to the kernel, so every step faults the same megabytes in again (the kernel
// zeroes each page): system time in the cnn's learner, and on a node whose ranks share the
// memory bus, a fight for bandwidth that costs data-parallel scaling (docs/results/HISTORY.md). Blocks up
// to glibc's mmap ceiling (32 MiB) come from the heap and freed memory stays mapped, so a process
// holds its high-water mark, as PyTorch's caching allocators do on GPUs. Call once at start.
void keep_freed_memory_for_reuse();

// RL deterministic mode (run.deterministic): TANDEM_DETERMINISTIC=1 in the environment, set by
// `tandem run` for its children. Actors and learner then run in lockstep with one thread each.
bool deterministic_mode();

}  // namespace tandem
