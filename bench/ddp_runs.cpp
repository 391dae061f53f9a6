#include "bench/ddp_runs.hpp"

#include <sys/wait.h>

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <utility>
#include <vector>

#include "common/error.hpp"
#include "common/process.hpp"
#include "bench/bench_json.hpp"
#include "bench/peer_process.hpp"

namespace tandem::bench {
namespace {

// Learner ranks report a window of steps at a time, ten windows per measurement; the launcher samples
// the control block this often and logs the window it finds, so a window shorter than this (a tiny
// model) may go unseen, which only thins the sample.
constexpr double kMetricsInterval = 0.05;
int report_every(const DdpBenchOptions& o) { return std::max(10, o.steps / 10); }

// Runs `command` (stderr merged), echoing each line under ours; returns its exit status.
int run_echoed(const std::string& command) {
  fmt::print("\n$ {}\n", command);
  std::fflush(stdout);
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) fail("cannot start `{}`", command);
  char buf[4096];
  while (std::fgets(buf, sizeof buf, pipe) != nullptr) fmt::print("  | {}", buf);
  const int status = ::pclose(pipe);
  std::fflush(stdout);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);  // as the shell says it
}

// `gpu`: the GPU of an independent one-rank job on a cuda run (job j on GPU j, as rank j would be).
std::string job_config(const DdpBenchOptions& o, int ranks, const std::filesystem::path& run_dir,
                       const std::string& job = "bench-ddp", int gpu = 0) {
  // supervised.batch_size counts all ranks' samples: --batch per rank times the ranks.
  // One thread per rank, a constant learning rate, and nothing else in the loop: no actors, no
  // publishing or checkpoints on the way. CPU ranks read batches through one feed thread each; GPU
  // ranks gather theirs on the GPU (DeviceFeed), eagerly or captured (learner.cuda_graph).
  const bool cuda = o.device == "cuda";
  return fmt::format(R"([run]
job = "{}"
learners = {}
actors = 0
run_dir = "{}"
status = "off"
metrics_interval_s = {}
[data]
name = "{}"
[model]
name = "{}"
[learner]
device = "{}"
precision = "{}"
cuda_graph = {}
threads = 1
report_every_steps = {}
[supervised]
feed = "{}"
feed_workers = {}
batch_size = {}
steps = {}
[schedule]
name = "constant"
warmup_steps = 0
[publish]
every_steps = 0
[checkpoint]
every_steps = 0
[ddp]
bucket_first_mb = {}
bucket_mb = {}
cpu_collectives = "{}"
shm_progress = "{}"
)",
                     job, ranks, run_dir.string(), kMetricsInterval, o.dataset, o.model,
                     cuda && gpu > 0 ? fmt::format("cuda:{}", gpu) : o.device, o.precision, o.cuda_graph,
                     report_every(o), cuda ? "device" : "host", cuda ? 0 : 1, o.batch * ranks, o.warmup + o.steps,
                     o.bucket_first_mb, o.bucket_mb, o.collectives, o.shm_progress);
}

double mean(const std::vector<double>& v) {
  double sum = 0;
  for (double x : v) sum += x;
  return v.empty() ? 0 : sum / static_cast<double>(v.size());
}

// Each rank's windows wholly after the warmup (one record per window: the launcher logs a row when its
// metrics change), averaged per rank, then over the ranks.
DdpResult read_metrics(const std::filesystem::path& file, const DdpBenchOptions& o, int ranks) {
  std::ifstream in(file);
  if (!in) fail("{} is missing: the ranks' metrics were not written", file.string());
  std::map<std::string, std::map<std::uint64_t, Json>> windows;  // process -> step -> record
  for (std::string line; std::getline(in, line);) {
    Json r = Json::parse(line, nullptr, false);
    if (!r.is_object() || r.value("role", "") != "learner" || !r.contains("seconds")) continue;
    const std::uint64_t step = r.value("step", std::uint64_t{0});
    if (step < static_cast<std::uint64_t>(o.warmup) + static_cast<std::uint64_t>(report_every(o))) continue;
    const std::string process = r.value("process", "");
    windows[process][step] = std::move(r);
  }
  if (static_cast<int>(windows.size()) != ranks)
    fail(
        "{} has measured windows from {} of {} ranks (each window was shorter than the launcher's {} s sampling): "
        "raise --steps",
        file.string(), windows.size(), ranks, kMetricsInterval);
  std::vector<double> step_s, allreduce_s, exposed_s;
  for (const auto& [process, records] : windows) {
    std::vector<double> s, a, e;
    for (const auto& [step, r] : records) {
      s.push_back(r.at("seconds").get<double>());
      if (r.contains("allreduce_s")) a.push_back(r.at("allreduce_s").get<double>());
      if (r.contains("exposed_comm_s")) e.push_back(r.at("exposed_comm_s").get<double>());
    }
    step_s.push_back(mean(s));
    if (!a.empty()) allreduce_s.push_back(mean(a));
    if (!e.empty()) exposed_s.push_back(mean(e));
  }
  DdpResult r{.ranks = ranks, .step_ms = mean(step_s) * 1e3};
  r.samples_per_s = ranks * o.batch / mean(step_s);
  if (!allreduce_s.empty()) r.allreduce_ms = mean(allreduce_s) * 1e3;
  if (!exposed_s.empty()) r.exposed_comm_ms = mean(exposed_s) * 1e3;
  return r;
}

}  // namespace

DdpResult run_tandem_ranks(const DdpBenchOptions& o, int ranks, const std::filesystem::path& work_dir) {
  const auto run_dir = work_dir / fmt::format("tandem-{}-ranks", ranks);
  const auto config = work_dir / fmt::format("tandem-{}-ranks.toml", ranks);
  std::ofstream(config) << job_config(o, ranks, run_dir);
  const std::string command = fmt::format("{} run {}", shell_quote(find_tandem_launcher(o.tandem)),
                                          shell_quote(config.string()));
  if (const int status = run_echoed(command); status != 0)
    fail("`{}` failed (status {}): see its output above", command, status);
  return read_metrics(run_dir / "metrics.jsonl", o, ranks);
}

DdpResult run_independent_ranks(const DdpBenchOptions& o, int jobs, const std::filesystem::path& work_dir) {
  // One shell starts them all and waits for each; it fails if any failed.
  std::string script;
  std::vector<std::filesystem::path> run_dirs;
  for (int j = 0; j < jobs; ++j) {
    run_dirs.push_back(work_dir / fmt::format("independent-{}", j));
    const auto config = work_dir / fmt::format("independent-{}.toml", j);
    std::ofstream(config) << job_config(o, 1, run_dirs.back(), fmt::format("bench-ddp-independent-{}", j), j);
    script += fmt::format("{} run {} & p{}=$!; ", shell_quote(find_tandem_launcher(o.tandem)),
                          shell_quote(config.string()), j);
  }
  script += "ok=0; ";
  for (int j = 0; j < jobs; ++j) script += fmt::format("wait $p{} || ok=1; ", j);
  script += "exit $ok";
  const std::string command = "sh -c " + shell_quote(script);
  if (const int status = run_echoed(command); status != 0)
    fail("the independent one-rank jobs failed (status {}): see their output above", status);
  DdpResult sum{.ranks = jobs};
  for (const auto& dir : run_dirs) {
    const DdpResult r = read_metrics(dir / "metrics.jsonl", o, 1);
    sum.step_ms += r.step_ms / jobs;
    sum.samples_per_s += r.samples_per_s;
    sum.slowest_step_ms = std::max(sum.slowest_step_ms, r.step_ms);
  }
  return sum;
}

DdpResult run_peer_ranks(const DdpBenchOptions& o, int ranks, const std::filesystem::path& work_dir) {
  const auto result = work_dir / fmt::format("peer-{}-ranks.json", ranks);
  // torchrun as a module of the chosen Python; Debian's torchrun crashes in an enum on Python 3.11
  // unless its output is redirected and teed. torchrun sets OMP_NUM_THREADS=1 for 2 or more
  // processes only: set for every run, so that 1 and N processes run alike.
  const std::string command = fmt::format(
      "OMP_NUM_THREADS=1 {} -m torch.distributed.run --standalone --nproc_per_node={} --redirects 1 --tee 1 {} --dataset {} --model {} "
      "--device {} --precision {} --batch {} --steps {} --warmup {} --json {}",
      shell_quote(o.python), ranks, shell_quote(find_peer_script(o.peer_script, "ddp_peer.py")), shell_quote(o.dataset),
      o.model, o.device, o.precision, o.batch, o.steps, o.warmup, shell_quote(result.string()));
  if (const int status = run_echoed(command); status != 0)
    fail("the peer `{}` failed (status {}): see its output above", command, status);
  std::ifstream in(result);
  Json line = Json::parse(in, nullptr, false);
  if (line.is_discarded() || !line.contains("step_ms"))
    fail("the peer `{}` wrote no result to {}: see its output above", command, result.string());
  return {.ranks = ranks, .step_ms = line.at("step_ms"), .samples_per_s = line.at("samples_per_s")};
}

}  // namespace tandem::bench
