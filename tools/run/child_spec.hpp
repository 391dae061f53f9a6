// How the launcher starts one process of a program group (job_groups.hpp): its command with the
// placeholders filled in ({index}: its place in the group), and an environment that is the
// launcher's own minus the variables it sets, plus those: TANDEM_JOB, TANDEM_ROLE, TANDEM_INDEX (the
// role's index: its control-block row), TANDEM_GROUP, TANDEM_GROUP_INDEX, TANDEM_GROUP_SIZE,
// TANDEM_RUN_DIR, TANDEM_CONFIG, TANDEM_LEARNERS, TANDEM_ACTORS (this node's built-in actors: the
// programs' settings count rollout rings by it), and for learners torchrun's RANK (global: node_rank x
// local ranks + LOCAL_RANK), LOCAL_RANK, WORLD_SIZE (every node's ranks), LOCAL_WORLD_SIZE,
// GROUP_RANK (the node), GROUP_WORLD_SIZE (nodes), MASTER_ADDR, MASTER_PORT (the same for every rank
// of every node).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "shm/control_block.hpp"
#include "tools/run/child_process.hpp"
#include "tools/run/job_config.hpp"

namespace tandem::run {

// One job as its processes see it.
struct Job {
  std::string id;                      // e.g. fmnist-3f9a
  std::filesystem::path run_dir;       // absolute, exists
  std::filesystem::path child_config;  // run_dir/job.toml
  std::uint16_t master_port = 0;
};

// `group_index`: 0..group.count-1.
ChildProcess::Spec child_spec(const JobConfig& config, const Job& job, const ProgramGroup& group,
                              std::uint32_t group_index);

}  // namespace tandem::run
