#include "tools/run/child_spec.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <string_view>
#include <utility>
#include <vector>

extern char** environ;

namespace tandem::run {
namespace {

// Placeholders in program arguments.
std::string substitute(std::string arg, const std::vector<std::pair<std::string, std::string>>& values) {
  for (const auto& [key, value] : values)
    for (std::size_t at; (at = arg.find(key)) != std::string::npos;) arg.replace(at, key.size(), value);
  return arg;
}

// The launcher's environment without the variables it sets for its children.
std::vector<std::string> inherited_environment() {
  static const std::vector<std::string_view> kOwned = {
      "TANDEM_JOB",   "TANDEM_ROLE",    "TANDEM_GROUP",     "TANDEM_GROUP_INDEX",  "TANDEM_GROUP_SIZE",
      "TANDEM_INDEX", "TANDEM_RUN_DIR", "TANDEM_CONFIG",    "TANDEM_LEARNERS",     "TANDEM_ACTORS",
      "RANK",         "WORLD_SIZE",     "LOCAL_RANK",       "LOCAL_WORLD_SIZE",    "GROUP_RANK",
      "MASTER_ADDR",  "MASTER_PORT",    "GROUP_WORLD_SIZE", "TANDEM_DETERMINISTIC"};
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string_view entry(*e);
    const auto name = entry.substr(0, entry.find('='));
    if (std::find(kOwned.begin(), kOwned.end(), name) == kOwned.end()) env.emplace_back(entry);
  }
  return env;
}

}  // namespace

ChildProcess::Spec child_spec(const JobConfig& cfg, const Job& job, const ProgramGroup& group,
                              std::uint32_t group_index) {
  const shm::Role role = group.role;
  const std::uint32_t index = group.first_index + group_index;
  const ProgramSpec& program = group.program;
  const std::vector<std::pair<std::string, std::string>> values = {{"{config}", job.child_config.string()},
                                                                   {"{run_dir}", job.run_dir.string()},
                                                                   {"{job}", job.id},
                                                                   {"{index}", std::to_string(group_index)}};
  ChildProcess::Spec spec{program.path, {}, inherited_environment()};
  for (const auto& a : program.args) spec.args.push_back(substitute(a, values));
  auto set = [&](std::string_view name, const std::string& value) {
    spec.env.push_back(fmt::format("{}={}", name, value));
  };
  set("TANDEM_JOB", job.id);
  set("TANDEM_ROLE", std::string(shm::role_name(role)));
  set("TANDEM_INDEX", std::to_string(index));
  set("TANDEM_GROUP", group.name);
  set("TANDEM_GROUP_INDEX", std::to_string(group_index));
  set("TANDEM_GROUP_SIZE", std::to_string(group.count));
  set("TANDEM_RUN_DIR", job.run_dir.string());
  set("TANDEM_CONFIG", job.child_config.string());
  set("TANDEM_LEARNERS", std::to_string(cfg.learners));
  set("TANDEM_ACTORS", std::to_string(cfg.actors));
  if (cfg.deterministic) set("TANDEM_DETERMINISTIC", "1");
  if (role == shm::Role::learner) {  // torchrun's variables: this node's ranks among every node's
    set("RANK", std::to_string(cfg.global_rank(index)));
    set("LOCAL_RANK", std::to_string(index));
    set("WORLD_SIZE", std::to_string(cfg.world_size()));
    set("LOCAL_WORLD_SIZE", std::to_string(cfg.learners));
    set("GROUP_RANK", std::to_string(cfg.node_rank));
    set("GROUP_WORLD_SIZE", std::to_string(cfg.nnodes));
    set("MASTER_ADDR", cfg.master_addr);
    set("MASTER_PORT", std::to_string(job.master_port));
  }
  return spec;
}

}  // namespace tandem::run
