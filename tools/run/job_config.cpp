#include "tools/run/job_config.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <sstream>

#include "common/error.hpp"
#include "common/process.hpp"
#include "shm/segment.hpp"
#include "tools/run/job_check.hpp"
#include "tools/run/default_config.hpp"  // generated: examples/fmnist-cnn.toml

namespace tandem::run {
namespace {

using T = ConfigType;

// clang-format off
const std::vector<ConfigKey> kRunKeys = {
    {"run.job", T::string, "\"job\"", "job name; the job id adds a random suffix (see run.unique_id), e.g. job-3f9a"},
    {"run.unique_id", T::boolean, "true", "append a random 4-hex-digit suffix to run.job, so jobs of one name can run side by side"},
    {"run.learners", T::integer, "1", "learner ranks (WORLD_SIZE); rank r gets RANK=r, LOCAL_RANK=r", 1, 256},
    {"run.actors", T::integer, "2", "built-in actor processes (group \"actor\", run.actor_program); [[run.group]] adds your own (see the end)", 0, 4096},
    {"run.learner_program", T::string, "\"tandem-learner\"", "learner program: a path, or a name found next to the tandem binary or on PATH; [run.learner] command = [...] instead takes an argv list"},
    {"run.learner_args", T::string, "\"\"", "learner arguments, split at spaces; {config}, {run_dir}, {job}, {index} are replaced"},
    {"run.actor_program", T::string, "\"tandem-actor\"", "actor program: a path, or a name found next to the tandem binary or on PATH"},
    {"run.actor_args", T::string, "\"\"", "actor arguments, split at spaces; {config}, {run_dir}, {job}, {index} are replaced"},
    {"run.runs_dir", T::string, "\"runs\"", "parent of the run directories (config, metrics.jsonl, checkpoints)"},
    {"run.run_dir", T::string, "\"\"", "this job's run directory; empty: <runs_dir>/<job id>. Reuse a previous one to resume it"},
    {"run.max_restarts", T::integer, "5", "restarts allowed per actor before the job fails (learners are never restarted)", 0, 100000},
    {"run.restart_backoff_s", T::real, "0.5", "delay before restarting a crashed actor; doubles with each crash in a row", 0.0, 3600.0},
    {"run.restart_backoff_max_s", T::real, "30", "the longest restart delay", 0.0, 3600.0},
    {"run.heartbeat_timeout_s", T::real, "30", "a running process whose heartbeat is older than this is hung: killed (actor: restarted); data-parallel learner ranks: at most half of ddp.collective_timeout_s, so a hung rank is named before its peers time out; 0 = off", 0.0, 86400.0},
    {"run.start_timeout_s", T::real, "300", "time a process has from spawn to reporting itself running; 0 = off", 0.0, 86400.0},
    {"run.stop_timeout_s", T::real, "60", "after a stop request (end, Ctrl-C), time to exit before SIGTERM (learners checkpoint meanwhile)", 0.0, 86400.0},
    {"run.kill_timeout_s", T::real, "5", "after SIGTERM, time before SIGKILL; also the grace for the others when a process fails", 0.0, 3600.0},
    {"run.status", T::string, "\"auto\"", "progress display: live (one line redrawn), plain (a line every status_interval_s), off; auto: live on a terminal", {}, {}, {"auto", "live", "plain", "off"}},
    {"run.status_interval_s", T::real, "10", "seconds between plain status lines", 0.1, 86400.0},
    {"run.metrics_interval_s", T::real, "1", "seconds between samples of the control block into <run_dir>/metrics.jsonl", 0.05, 3600.0},
    {"run.dashboard", T::boolean, "true", "serve the live dashboard (/) and Prometheus text (/metrics) on http://127.0.0.1:<run.metrics_port>; the URL is printed and written to <run_dir>/dashboard.url. false: nothing is served unless run.metrics_port is set"},
    {"run.metrics_port", T::integer, "0", "loopback port of the dashboard and /metrics; 0 = a free one (nothing is served when run.dashboard is false and this is 0)", 0, 65535},
    {"run.master_addr", T::string, "\"127.0.0.1\"", "MASTER_ADDR given to learner ranks"},
    {"run.master_port", T::integer, "0", "MASTER_PORT given to learner ranks; 0 = a free port chosen at start", 0, 65535},
    {"run.deterministic", T::boolean, "false", "RL: run actors and learner in lockstep (synchronous rollouts, fixed seeds, one thread each) so two runs give byte-identical checkpoints; the children see TANDEM_DETERMINISTIC=1"},
};
// clang-format on

// The multi-node flags, checked against each other and the config before anything starts: a rank
// placed wrongly would otherwise wait out ddp.rendezvous_timeout_s.
void apply_node_flags(JobConfig& j, const NodeFlags& n) {
  if (n.nnodes < 1 || n.nnodes > 4096) fail("--nnodes {} is out of range: use 1..4096", n.nnodes);
  if (n.node_rank >= n.nnodes)
    fail("--node-rank {} is not below --nnodes {}: number the nodes 0..{}", n.node_rank, n.nnodes, n.nnodes - 1);
  if (n.master_port > 65535 || n.master_port < -1 || n.master_port == 0)
    fail("--master-port {} is not a TCP port: use 1..65535 (the same on every node)", n.master_port);
  if (static_cast<std::uint64_t>(n.nnodes) * j.learners > (1u << 20))
    fail("--nnodes {} x run.learners {} ranks is too many: use fewer nodes or ranks per node", n.nnodes, j.learners);
  if (!n.master_addr.empty()) {
    if (n.master_addr.find_first_of(" \t\n") != std::string::npos)
      fail("--master-addr \"{}\" is not a host name or address: give node 0's address", n.master_addr);
    j.master_addr = n.master_addr;
  }
  if (n.master_port > 0) j.master_port = static_cast<std::uint16_t>(n.master_port);
  if (n.nnodes > 1) {
    // Every node must name the same rendezvous point, so neither may be left to a default.
    if (n.master_addr.empty())
      fail("--nnodes {} needs --master-addr HOST: the address of node 0 that every node can reach", n.nnodes);
    if (j.master_port == 0)
      fail(
          "--nnodes {} needs --master-port PORT (or run.master_port): the same free port on every node; node 0's "
          "rank 0 listens on it",
          n.nnodes);
  }
  j.nnodes = n.nnodes;
  j.node_rank = n.node_rank;
}

}  // namespace

std::span<const ConfigKey> run_keys() { return kRunKeys; }

std::vector<ConfigKey> job_schema() {
  std::vector<ConfigKey> keys(kRunKeys.begin(), kRunKeys.end());
  const std::vector<ConfigKey> programs = program_schema();
  keys.insert(keys.end(), programs.begin(), programs.end());
  return keys;
}

JobConfig JobConfig::load(const std::filesystem::path& file, std::span<const std::string> overrides,
                          const NodeFlags& nodes) {
  const auto schema = job_schema();
  const std::string text = file.empty() ? std::string(kDefaultJobConfig) : read_config_text(file);
  const std::string origin = file.empty() ? "<default: examples/fmnist-cnn.toml>" : file.string();
  // The program groups are tables the schema cannot describe: job_groups.cpp checks them.
  static constexpr std::string_view kGroupTables[] = {kLearnerTable, kGroupTable};
  Config config = Config::parse(text, origin, overrides, schema, kGroupTables, renamed_keys());
  const toml::table document = toml::parse(text, origin);  // Config::parse has refused a bad document
  for (const auto& note : config.notes()) fmt::print(stderr, "tandem: {}\n", note);
  JobConfig j{.config = std::move(config)};
  j.group_tables = run::group_tables(document);
  run::apply_group_overrides(j.group_tables, overrides);
  const Config& c = j.config;

  j.job_name = c.string("run.job");
  j.unique_id = c.boolean("run.unique_id");
  try {
    shm::check_name_part("job name", j.job_name);
    if (j.job_name.size() > 58) fail("is too long");
    if (j.job_name == "data") fail("is reserved for dataset caches");
  } catch (const UserError&) {
    fail("config: run.job = \"{}\" is not a valid job name: use 1-58 letters, digits, '_' or '-' (not \"data\")",
         j.job_name);
  }
  j.learners = static_cast<std::uint32_t>(c.integer("run.learners"));
  j.actors = static_cast<std::uint32_t>(c.integer("run.actors"));
  j.groups = program_groups(j.group_tables, {.learners = j.learners,
                                             .actors = j.actors,
                                             .learner_program = c.string("run.learner_program"),
                                             .learner_args = c.string("run.learner_args"),
                                             .actor_program = c.string("run.actor_program"),
                                             .actor_args = c.string("run.actor_args")});
  j.runs_dir = c.string("run.runs_dir");
  j.run_dir = c.string("run.run_dir");
  if (j.runs_dir.empty()) fail("config: run.runs_dir is empty: set it to a directory, e.g. \"runs\"");
  j.max_restarts = static_cast<std::uint32_t>(c.integer("run.max_restarts"));
  j.restart_backoff_s = c.real("run.restart_backoff_s");
  j.restart_backoff_max_s = c.real("run.restart_backoff_max_s");
  if (j.restart_backoff_max_s < j.restart_backoff_s)
    fail("config: run.restart_backoff_max_s = {} is shorter than run.restart_backoff_s = {}: raise it",
         j.restart_backoff_max_s, j.restart_backoff_s);
  j.heartbeat_timeout_s = c.real("run.heartbeat_timeout_s");
  j.start_timeout_s = c.real("run.start_timeout_s");
  j.stop_timeout_s = c.real("run.stop_timeout_s");
  j.kill_timeout_s = c.real("run.kill_timeout_s");
  const std::string status = c.string("run.status");
  j.status = status == "live"    ? StatusMode::live
             : status == "plain" ? StatusMode::plain
             : status == "off"   ? StatusMode::off
                                 : StatusMode::automatic;
  j.status_interval_s = c.real("run.status_interval_s");
  j.metrics_interval_s = c.real("run.metrics_interval_s");
  j.metrics_port = static_cast<std::uint16_t>(c.integer("run.metrics_port"));
  j.dashboard = c.boolean("run.dashboard");
  j.master_addr = c.string("run.master_addr");
  if (j.master_addr.empty()) fail("config: run.master_addr is empty: use 127.0.0.1 for a single node");
  j.master_port = static_cast<std::uint16_t>(c.integer("run.master_port"));
  j.deterministic = c.boolean("run.deterministic");
  apply_node_flags(j, nodes);
  j.settings = JobSettings::parse(
      c,
      {.learners = j.world_size(), .local_learners = j.learners, .actors = j.actors, .deterministic = j.deterministic});
  // What the built-in programs would otherwise find out at start; a job of only the user's own
  // programs needs no dataset cache or env.
  if (std::any_of(j.groups.begin(), j.groups.end(), [](const auto& g) { return g.builtin && g.count > 0; }))
    check_job_inputs(j.settings);
  return j;
}

std::string JobConfig::resolved_toml() const {
  toml::table all = toml::parse(config.to_toml());
  if (toml::table* run = all["run"].as_table()) put_group_tables(group_tables, *run);
  std::ostringstream out;
  out << all;
  return out.str() + "\n";
}

std::string child_toml(const Config& config) {
  toml::table all = toml::parse(config.to_toml());
  all.erase("run");
  std::ostringstream out;
  out << all;
  return out.str() + "\n";
}

}  // namespace tandem::run
