// tandem run [config.toml] [--set key=value ...] [--nnodes M --node-rank K --master-addr H
// --master-port P] | tandem status [JOB] [--json]
#include <fmt/format.h>

#include <filesystem>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "shm/control_block.hpp"
#include "shm/segment.hpp"
#include "common/cli_actions.hpp"
#include "tools/commands.hpp"
#include "tools/run/job_config.hpp"
#include "tools/run/job_view.hpp"
#include "tools/run/run_job.hpp"

namespace tandem::tools {
namespace {

// Job ids of running jobs: every valid control block in /dev/shm.
std::vector<std::string> running_jobs() {
  std::vector<std::string> jobs;
  for (const auto& s : shm::list_segments()) {
    // Another user's job is listed too: attaching it says whose it is rather than hiding it.
    if (!s.name.ends_with(".ctl") || (s.ours && (!s.valid || s.kind != shm::Kind::control))) continue;
    jobs.push_back(s.name.substr(7, s.name.size() - 7 - 4));  // tandem.<job>.ctl
  }
  return jobs;
}

// `--json`: one object for a job named, else an array of every running job's object.
int status_json(const std::string& job) {
  if (!job.empty()) {
    fmt::print("{}\n", run::status_json(shm::ControlBlock::attach(job, shm::Segment::Access::read_only)).dump(2));
    return 0;
  }
  auto all = nlohmann::ordered_json::array();
  for (const auto& id : running_jobs()) {
    try {
      all.push_back(run::status_json(shm::ControlBlock::attach(id, shm::Segment::Access::read_only)));
    } catch (const UserError& e) {  // it ended between listing and attaching
      all.push_back({{"job", id}, {"error", e.what()}});
    }
  }
  fmt::print("{}\n", all.dump(2));
  return 0;
}

int status(const std::string& job) {
  if (!job.empty()) {
    auto block = shm::ControlBlock::attach(job, shm::Segment::Access::read_only);
    fmt::print("{}", run::status_table(block));
    return 0;
  }
  const auto jobs = running_jobs();
  if (jobs.empty()) {
    fmt::print("no running jobs (no /dev/shm/tandem.*.ctl)\n");
    return 0;
  }
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    if (i > 0) fmt::print("\n");
    try {
      auto block = shm::ControlBlock::attach(jobs[i], shm::Segment::Access::read_only);
      fmt::print("{}", run::status_table(block));
    } catch (const UserError& e) {  // it ended between listing and attaching
      fmt::print("job {}: {}\n", jobs[i], e.what());
    }
  }
  return 0;
}

}  // namespace

void add_run_commands(CLI::App& app) {
  auto* run = app.add_subcommand("run", "run a job: spawn and supervise its learner ranks and actors");
  run->footer(
      "Exit status: 0 when the job succeeded (every learner finished and every evaluator evaluated the final\n"
      "version), 128+N when signal N (Ctrl-C: 130) stopped it, during start-up or later, and no\n"
      "process failed (learners checkpoint on the way), 1 when it failed or a config value is bad.\n"
      "Without a config file the embedded defaults apply. `tandem run --explain` lists every key.");
  static std::string config_file;
  static std::vector<std::string> overrides;
  static bool explain = false;
  static run::NodeFlags nodes;
  run->add_option("config", config_file, "job config (TOML); omitted: the embedded defaults");
  run->add_option("--set", overrides, "override a key, e.g. --set run.actors=4 (repeatable)")->take_all();
  run->add_flag("--explain", explain, "print every config key with its default and documentation, and exit");
  run->add_option("--nnodes", nodes.nnodes,
                  "nodes of a multi-node job; each runs run.learners ranks and run.actors actors")
      ->capture_default_str();
  run->add_option("--node-rank", nodes.node_rank,
                  "this node's index, 0..nnodes-1 (global rank = node rank x run.learners + local rank)")
      ->capture_default_str();
  run->add_option("--master-addr", nodes.master_addr,
                  "node 0's address, where rank 0 hosts the rendezvous (default: run.master_addr)");
  run->add_option("--master-port", nodes.master_port,
                  "the rendezvous port, the same on every node (default: run.master_port)");
  cli::on_run(run, [] {
    if (explain) {
      fmt::print("{}{}", describe_schema(run::job_schema()), run::program_groups_doc());
      fmt::print("\n# Former spellings, loaded (with a note) until the next release:\n");
      for (const auto& r : renamed_keys()) fmt::print("#   {} -> {}\n", r.old_key, r.key);
      return 0;
    }
    return run::run_job(config_file, overrides, nodes);
  });
}

void add_status_commands(CLI::App& app) {
  auto* cmd = app.add_subcommand("status", "show a running job's processes and metrics (from its control block)");
  static std::string job;
  static bool json = false;
  cmd->add_option("job", job, "job id, e.g. fmnist-3f9a; omitted: every running job");
  cmd->add_flag("--json", json, "print JSON (an object for JOB, else an array of every running job) for scripts");
  cli::on_run(cmd, [] { return json ? status_json(job) : status(job); });
}

}  // namespace tandem::tools
