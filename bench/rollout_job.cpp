// (b) of `tandem-bench rollout`: CartPole PPO or V-trace as a user runs it, through `tandem run`.
//
// Throughput: a bench config (actor_critic_mlp 64x64, learner.algo = ppo, actor.role = rollout,
// --job-actors actors x --job-envs envs, a fixed rl.total_env_steps, no early stop); the figure is the
// learner's env_steps_per_s in metrics.jsonl (the steps it consumed), median over its reports after
// the first, next to env steps / wall seconds of the whole `tandem run`, and the limiting stage: from
// the shares of their time the processes report (docs/FORMAT.md, ProcessMetrics), the learner when it
// seldom waits for slots, the actors when they seldom wait on full rings.
// Time-to-solve: examples/cartpole-ppo.toml (or --config) with rl.stop_on_return = true, seeds
// 0..--seeds-1; the figure is the wall time of `tandem run` from spawn to exit, startup and teardown
// included. A run counts as solved when it exits 0 and the learner said "solved" or reported an
// episode return >= rl.stop_return (475).
// Every job's run directory and log live in a temporary directory removed on return.
#include <fmt/format.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <vector>

#include "common/clock.hpp"
#include "common/error.hpp"
#include "common/process.hpp"
#include "bench/peer_process.hpp"
#include "bench/rollout_options.hpp"

namespace tandem::bench {
namespace {

namespace fs = std::filesystem;
constexpr double kSolvedReturn = 475.0;

// mkdtemp, removed with everything in it when destroyed.
class ScratchDir {
 public:
  ScratchDir() {
    std::string pattern = (fs::temp_directory_path() / "tandem-rollout-bench.XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) TANDEM_FAIL_SYS(errno, "mkdtemp");
    path_ = pattern;
  }
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

std::string example_config(const RolloutBenchOptions& o) {
  if (!o.config.empty()) {
    if (!fs::exists(o.config)) fail("--config {} does not exist: pass a job config file", o.config);
    return o.config;
  }
  std::vector<std::string> roots;
  if (const char* env = std::getenv("TANDEM_SOURCE_ROOT")) roots.emplace_back(env);
  roots.emplace_back(TANDEM_SOURCE_DIR);
  roots.emplace_back(".");
  for (const auto& root : roots)
    if (fs::exists(root + "/examples/cartpole-ppo.toml")) return root + "/examples/cartpole-ppo.toml";
  fail("cannot find examples/cartpole-ppo.toml: run from the source tree, pass --config PATH, or --no-job");
}

struct JobRun {
  int status = -1;
  double wall_s = 0;
  std::string log;            // stdout + stderr of `tandem run`
  std::vector<Json> learner;  // the learners' metrics.jsonl records, in order
  std::vector<Json> actors;   // the rollout actors' records that say where their time went
};

JobRun run_job(const std::string& tandem, const std::string& config, const std::vector<std::string>& sets,
               const fs::path& run_dir) {
  const fs::path log_file = run_dir.string() + ".log";
  std::string command = fmt::format("{} run {} --set run.run_dir={}", shell_quote(tandem), shell_quote(config),
                                    shell_quote(run_dir.string()));
  for (const auto& s : sets) command += fmt::format(" {}", shell_quote(s));
  fmt::print("  $ {}\n", command);
  std::fflush(stdout);
  JobRun run;
  const std::uint64_t start = monotonic_ns();
  const int raw = std::system((command + " > " + shell_quote(log_file.string()) + " 2>&1").c_str());
  run.wall_s = double(monotonic_ns() - start) * 1e-9;
  run.status = raw == -1 ? -1 : WIFEXITED(raw) ? WEXITSTATUS(raw) : 128 + WTERMSIG(raw);
  std::ifstream log(log_file);
  run.log.assign(std::istreambuf_iterator<char>(log), {});
  std::ifstream metrics(run_dir / "metrics.jsonl");
  for (std::string line; std::getline(metrics, line);) {
    Json record = Json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!record.is_object()) continue;
    if (record.value("role", "") == "learner") run.learner.push_back(std::move(record));
    else if (record.contains("env_share")) run.actors.push_back(std::move(record));
  }
  return run;
}

std::string last_lines(const std::string& text, int count) {
  std::size_t start = text.size();
  if (start > 0 && text[start - 1] == '\n') --start;  // the final newline ends the last line
  for (int n = 0; n < count && start > 0; ++n) {
    const std::size_t newline = text.rfind('\n', start - 1);
    start = newline == std::string::npos ? 0 : newline;
  }
  return start == 0 ? text : text.substr(start + 1);
}

void require_success(const JobRun& run, const std::string& what) {
  if (run.status == 0) return;
  fmt::print("{}", last_lines(run.log, 20));
  std::fflush(stdout);
  fail("the {} job failed (`tandem run` exit {}): its last lines are above; fix the job, or pass --no-job", what,
       run.status);
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

// The median of `key` over the records after each process's first (which includes its start).
double median_share(const std::vector<Json>& records, const char* key) {
  std::vector<double> v;
  std::vector<std::string> seen;
  for (const auto& r : records) {
    const std::string process = r.value("process", "");
    if (std::find(seen.begin(), seen.end(), process) == seen.end()) {
      seen.push_back(process);
      continue;
    }
    if (r.contains(key)) v.push_back(r.at(key).get<double>());
  }
  return v.empty() ? std::nan("") : median(v);
}

// Which side the other waits for: a stage busy more than 90 % of its time is the limit.
Json limiting_stage(const JobRun& run) {
  const double update = median_share(run.learner, "compute_share"), slots = median_share(run.learner, "wait_share");
  const double env = median_share(run.actors, "env_share"), policy = median_share(run.actors, "compute_share"),
               full = median_share(run.actors, "wait_share");
  std::string limit = "neither side saturated (start-up, scheduling or the host's cores)";
  if (slots < 0.1) limit = "the learner";
  else if (full < 0.1) limit = env >= policy ? "the actors' envs" : "the actors' policy";
  auto percent = [](double v) { return std::isnan(v) ? std::string("-") : fmt::format("{:.0f}%", v * 100); };
  fmt::print("  {:<52} {}\n", "limiting stage", limit);
  fmt::print("  {:<52} update {}, waiting for slots {}\n", "  learner time (median report)", percent(update),
             percent(slots));
  fmt::print("  {:<52} envs {}, policy {}, full ring {}\n", "  rollout actor time (median report)", percent(env),
             percent(policy), percent(full));
  auto share = [](double v) { return std::isnan(v) ? Json() : Json(rounded(v, 3)); };
  return {{"limit", limit},
          {"learner_update_share", share(update)},
          {"learner_wait_share", share(slots)},
          {"actor_env_share", share(env)},
          {"actor_policy_share", share(policy)},
          {"actor_wait_share", share(full)}};
}

// Each algorithm learns as its reference does unless --job-epochs / --job-minibatches say otherwise:
// PPO as CleanRL's recipe (4 passes of 4 minibatches over each batch, the peers' update), V-trace as
// IMPALA (one pass, each sample learned from once: the off-policy correction is what makes that safe).
Json throughput(const RolloutBenchOptions& o, const std::string& algo, const std::string& tandem, const fs::path& dir) {
  const bool ppo = algo == "ppo";
  const std::uint32_t epochs = o.job_epochs > 0 ? o.job_epochs : (ppo ? 4 : 1);
  const std::uint32_t minibatches = o.job_minibatches > 0 ? o.job_minibatches : (ppo ? 4 : 1);
  const std::uint32_t slots = o.job_slots > 0 ? o.job_slots : o.job_learners;
  const fs::path config = dir / fmt::format("throughput-{}.toml", algo);
  std::ofstream(config) << fmt::format(
      "[run]\njob = \"rollout-bench\"\nlearners = {}\nactors = {}\n"
      "[model]\nname = \"actor_critic_mlp\"\n"
      "[learner]\nalgo = \"{}\"\ndevice = \"{}\"\ncuda_graph = {}\n[optimizer]\nname = \"adam\"\nlr = 2.5e-4\n"
      "[actor]\nrole = \"rollout\"\n"
      "[env]\nname = \"cartpole\"\nenvs = {}\n"
      "[rl]\nrollout_steps = {}\nslots_per_update = {}\nupdate_epochs = {}\nminibatches = {}\ntotal_env_steps = {}\n"
      "stop_on_return = false\n",
      o.job_learners, o.job_actors, algo, o.job_device, o.job_cuda_graph, o.job_envs, o.job_rollout_steps, slots,
      epochs, minibatches, o.job_steps);
  fmt::print(
      "\n(b) CartPole-v1, actor_critic_mlp 64x64, {} ({} epochs x {} minibatches per batch), {} actors, {} learner "
      "rank{} on {}{}, {} slots an update, through `tandem run`\n",
      ppo ? "PPO" : "V-trace", epochs, minibatches, o.job_actors, o.job_learners, o.job_learners == 1 ? "" : "s",
      o.job_device, o.job_cuda_graph ? " (captured)" : "", slots);
  const JobRun run = run_job(tandem, config.string(), {}, dir / fmt::format("throughput-{}", algo));
  require_success(run, fmt::format("CartPole {} throughput", algo));
  std::vector<double> rates;
  double env_steps = 0;
  for (const auto& r : run.learner) {
    if (r.contains("env_steps_per_s")) rates.push_back(r.at("env_steps_per_s").get<double>());
    if (r.contains("env_steps")) env_steps = std::max(env_steps, r.at("env_steps").get<double>());
  }
  if (rates.empty())
    fail(
        "the CartPole throughput job exited 0 but its learner reported no env_steps_per_s in metrics.jsonl: "
        "the learner must report env steps (ControlClient::report)");
  if (rates.size() > 2) rates.erase(rates.begin());  // the first report includes the start
  const double rate = median(rates), end_to_end = env_steps / run.wall_s;
  fmt::print("  {:<52} {:>14.1f} k\n", "env steps/s the learner consumes (median report)", rate / 1e3);
  fmt::print("  {:<52} {:>14.1f} k\n", "env steps / wall s of the whole `tandem run`", end_to_end / 1e3);
  const Json stage = limiting_stage(run);
  return {{"algo", algo},
          {"stage", stage},
          {"actors", o.job_actors},
          {"learners", o.job_learners},
          {"device", o.job_device},
          {"cuda_graph", o.job_cuda_graph},
          {"slots_per_update", slots},
          {"envs", o.job_envs},
          {"rollout_steps", o.job_rollout_steps},
          {"update_epochs", epochs},
          {"minibatches", minibatches},
          {"env_steps", env_steps},
          {"wall_s", rounded(run.wall_s, 3)},
          {"env_steps_per_s", rounded(rate, 0)},
          {"env_steps_per_s_end_to_end", rounded(end_to_end, 0)},
          {"reports", rates.size()}};
}

bool solved(const JobRun& run) {
  if (run.status != 0) return false;
  if (run.log.find("solved") != std::string::npos) return true;
  return std::any_of(run.learner.begin(), run.learner.end(),
                     [](const Json& r) { return r.value("episode_return", 0.0) >= kSolvedReturn; });
}

Json time_to_solve(const RolloutBenchOptions& o, const std::string& tandem, const fs::path& dir) {
  const std::string config = example_config(o);
  Json runs = Json::array();
  std::vector<double> solved_s;
  for (std::uint32_t seed = 0; seed < o.seeds; ++seed) {
    const JobRun run = run_job(tandem, config, {fmt::format("env.seed={}", seed), "rl.stop_on_return=true"},
                               dir / fmt::format("solve-{}", seed));
    require_success(run, fmt::format("time-to-solve (seed {})", seed));
    const bool ok = solved(run);
    if (ok) solved_s.push_back(run.wall_s);
    fmt::print("  seed {}: {} in {:.2f} s\n", seed, ok ? "solved" : "NOT solved", run.wall_s);
    runs.push_back({{"seed", seed}, {"solved", ok}, {"wall_s", rounded(run.wall_s, 3)}});
  }
  Json out = {{"config", config}, {"runs", runs}, {"solved_runs", solved_s.size()}};
  out["time_to_solve_s"] = solved_s.empty() ? Json() : Json(rounded(median(solved_s), 3));
  return out;
}

}  // namespace

Json measure_job(const RolloutBenchOptions& o) {
  if (o.seeds < 1 || o.seeds > 100) fail("--seeds {} is out of range: use 1..100", o.seeds);
  if (o.job_actors < 1 || o.job_actors > 64) fail("--job-actors {} is out of range: use 1..64", o.job_actors);
  if (o.job_learners < 1 || o.job_actors % o.job_learners != 0)
    fail("--job-learners {} does not divide --job-actors {}: each rank consumes its own actors' rings", o.job_learners,
         o.job_actors);
  const std::string tandem = find_tandem_launcher(o.tandem);
  ScratchDir dir;
  Json out = {{"throughput", Json::object()}};
  for (const std::string algo : {"ppo", "vtrace"})
    if (o.job_algo == algo || o.job_algo == "both") out["throughput"][algo] = throughput(o, algo, tandem, dir.path());
  fmt::print("\n(b) time-to-solve: {} through `tandem run`\n", example_config(o));
  out["solve"] = time_to_solve(o, tandem, dir.path());
  return out;
}

}  // namespace tandem::bench
