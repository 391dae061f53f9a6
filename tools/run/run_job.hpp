// Everything `tandem run` does: load and check the config, make the run directory, supervise the
// job, remove its segments, print the outcome. Returns the exit code: 0 succeeded, 128 + signal
// interrupted cleanly, 1 failed. Call it from a single-threaded process (it forks).
#pragma once

#include <filesystem>
#include <span>
#include <string>

#include "tools/run/job_config.hpp"

namespace tandem::run {

int run_job(const std::filesystem::path& config_file, std::span<const std::string> overrides,
            const NodeFlags& nodes = {});

}  // namespace tandem::run
