// A job's programs, as groups: the learner (run.learners ranks of one command, torchrun's
// nproc_per_node), the built-in actors (run.actors of run.actor_program, group "actor"), and any
// number of user groups, each a name, a count and a command, e.g. 4 rollout actors + 1 evaluator +
// 1 logger:
//
//   [run.learner]                      # optional; default: run.learner_program + run.learner_args
//   command = ["/usr/bin/python3", "train.py", "--config", "{config}"]
//   heartbeat = true                   # it joins with tandem.job(): heartbeats, hang checks, graceful stop
//
//   [[run.group]]
//   name = "logger"                    # 1-15 of a-z 0-9 _ -, starting with a letter; not learner/actor
//   role = "actor"                     # the default, and the only role of a group (one learner per job)
//   count = 1                          # processes, 0..4096
//   command = ["/usr/bin/python3", "examples/python/logger.py", "{run_dir}"]
//   heartbeat = false                  # it never joins: supervised by its exit status only
//
// This file is the one home of these tables' rules: JobConfig::load hands it the document's
// [run.learner] and [[run.group]] (which the schema skips) and the legacy keys' values, and gets back
// every group with its command resolved (argv[0] a path, or a name found next to tandem or on PATH;
// a Python script named after the interpreter must exist). Control-block rows: the learner ranks,
// then the actor rows group by group in this order, so built-in actor i is still row learners + i.
// Threads: any; pure functions.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <toml++/toml.h>

#include "shm/control_block_format.hpp"

namespace tandem::run {

struct ProgramSpec {
  std::filesystem::path path;     // resolved, executable
  std::vector<std::string> args;  // argv[1..], placeholders not yet substituted
};

struct ProgramGroup {
  std::string name;  // "learner", "actor", or the run.group's name
  shm::Role role = shm::Role::actor;
  std::uint32_t count = 0;
  std::uint32_t first_index = 0;  // the role's index (TANDEM_INDEX) of its first process
  ProgramSpec program{};
  bool heartbeat = true;  // false: never joins the control block; supervised by exit status only
  bool builtin =
      false;  // run by the legacy keys' programs (tandem-learner, tandem-actor): evaluators owe the final version
};

// What the document says about programs outside the schema: [run.learner] and [[run.group]].
struct GroupTables {
  std::optional<toml::table> learner;
  std::optional<toml::array> groups;
};
// The tables the schema leaves to this file (Config's foreign tables).
inline constexpr std::string_view kLearnerTable = "run.learner";
inline constexpr std::string_view kGroupTable = "run.group";
GroupTables group_tables(const toml::table& document);

// Applies `--set run.learner.KEY=VALUE` and `--set run.group.NAME.KEY=VALUE` (a group is named by its
// name) to the tables; program_groups checks what they then say. Other keys are Config::parse's.
void apply_group_overrides(GroupTables& tables, std::span<const std::string> overrides);

// The legacy keys' values, read by JobConfig::load.
struct LegacyPrograms {
  std::uint32_t learners = 1;
  std::uint32_t actors = 0;
  std::string learner_program, learner_args, actor_program, actor_args;
};

// Every group in row order; throws UserError naming the group and the fix.
std::vector<ProgramGroup> program_groups(const GroupTables& tables, const LegacyPrograms& legacy);

// The tables as they would be written back into [run] (for the run directory's config.toml).
void put_group_tables(const GroupTables& tables, toml::table& run_table);

// Where the group is configured, for messages: "[run.learner]", "run.group \"logger\"".
std::string group_table(const ProgramGroup& group);

// `tandem run --explain`'s section on groups: the shape above, as commented TOML.
std::string_view program_groups_doc();

}  // namespace tandem::run
