// The job configuration `tandem run` reads: the launcher's own keys live in [run] (this file); the
// other tables belong to the programs it starts and are declared with their settings structs
// (common/settings/job.hpp). The launcher validates the whole document with the programs' own rules
// before it creates anything, so a bad value anywhere is one line naming the key, and nothing is
// left in /dev/shm. Former key spellings load with a note on stderr (renamed_keys()).
//
// What children get: the run directory holds config.toml (everything, resolved, for the record) and
// job.toml (the same without [run]); TANDEM_CONFIG names job.toml. Program arguments may use the
// placeholders {config} (job.toml), {run_dir}, {job} and {index} (rank, or place in its group).
// Program groups ([run.learner], [[run.group]]) are checked by tools/run/job_groups.hpp.
#pragma once

#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "common/config.hpp"
#include "common/settings/job.hpp"
#include "tools/run/job_groups.hpp"

namespace tandem::run {

// The [run] keys, every one documented (`tandem run --explain` prints them).
std::span<const ConfigKey> run_keys();
// Everything a job config may contain: run_keys() plus the programs' tables.
std::vector<ConfigKey> job_schema();

enum class StatusMode { automatic, live, plain, off };

// Where this launcher's ranks sit among every node's: `tandem run --nnodes M --node-rank K
// --master-addr HOST --master-port P`. Node K runs run.learners local ranks, global ranks
// K * run.learners + i, in a world of M * run.learners; each node runs its own run.actors actors,
// which follow that node's weight slab (its local rank 0 publishes). Fields left unset keep the
// config's values (run.master_addr, run.master_port).
struct NodeFlags {
  std::uint32_t nnodes = 1;
  std::uint32_t node_rank = 0;
  std::string master_addr{};  // empty: run.master_addr
  int master_port = -1;       // -1: run.master_port
};

// The [run] section, typed and checked beyond the schema (programs exist, names are valid), and the
// programs' settings as they will read them.
struct JobConfig {
  Config config;
  JobSettings settings{};
  std::string job_name{};  // run.job
  bool unique_id = true;
  std::uint32_t learners = 1;  // this node's learner ranks (run.learners)
  std::uint32_t actors = 0;    // the built-in actor group's (run.actors): what the programs' settings see
  // Every program group in control-block row order: the learner, the built-in actors (when
  // run.actors > 0), then [[run.group]]s (job_groups.hpp).
  std::vector<ProgramGroup> groups{};
  GroupTables group_tables{};  // as the document gave them, for the run directory's config.toml
  std::filesystem::path runs_dir{};
  std::filesystem::path run_dir{};  // empty: runs_dir / job id
  std::uint32_t max_restarts = 0;
  double restart_backoff_s = 0;
  double restart_backoff_max_s = 0;
  double heartbeat_timeout_s = 0;  // 0 = off
  double start_timeout_s = 0;      // 0 = off
  double stop_timeout_s = 0;
  double kill_timeout_s = 0;
  StatusMode status = StatusMode::automatic;
  double status_interval_s = 0;
  double metrics_interval_s = 0;
  std::uint16_t metrics_port = 0;  // 0 = a free port, or no endpoint when !dashboard
  bool dashboard = true;           // run.dashboard
  std::string master_addr{};
  std::uint16_t master_port = 0;  // 0 = a free port chosen at start
  bool deterministic = false;     // run.deterministic: children get TANDEM_DETERMINISTIC=1
  std::uint32_t nnodes = 1;       // --nnodes
  std::uint32_t node_rank = 0;    // --node-rank

  // file empty: the embedded defaults. Throws UserError naming the key on any bad value, including
  // the programs' inputs (dataset cache, splits, labels, env: tools/run/job_check.hpp).
  static JobConfig load(const std::filesystem::path& file, std::span<const std::string> overrides,
                        const NodeFlags& nodes = {});

  std::uint32_t world_size() const { return nnodes * learners; }
  // The resolved config (defaults filled in, groups included) as TOML, for <run_dir>/config.toml.
  std::string resolved_toml() const;
  std::uint32_t global_rank(std::uint32_t local_rank) const { return node_rank * learners + local_rank; }
};

// The config without its [run] section, as TOML (what the children read).
std::string child_toml(const Config& config);

}  // namespace tandem::run
