// tandem-bench ddp: data-parallel training throughput of Tandem's learner ranks (CPU ranks over the
// node's shared memory or Gloo, GPU ranks over NCCL), 1 rank and N ranks, beside PyTorch DDP
// (bench/peers/ddp_peer.py, Gloo or NCCL to match) in the same run:
// step time, samples/s, scaling efficiency (N-rank samples/s over N x the 1-rank samples/s, at the
// same batch per rank), and the all-reduce and exposed (not overlapped) communication time the ranks
// report.
#include <stdlib.h>

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <optional>
#include <vector>

#include "common/error.hpp"
#include "bench/bench_commands.hpp"
#include "bench/bench_json.hpp"
#include "bench/ddp_runs.hpp"
#include "common/cli_actions.hpp"

namespace tandem::bench {
namespace {

// A scratch directory for the configs, run dirs and the peer's results, removed on every exit.
class WorkDir {
 public:
  WorkDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "tandem-bench-ddp-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) fail("cannot create a directory under {}: set TMPDIR", pattern);
    path_ = pattern;
  }
  ~WorkDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  WorkDir(const WorkDir&) = delete;
  WorkDir& operator=(const WorkDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

std::string ms_text(double ms) { return ms < 0 ? std::string("-") : fmt::format("{:.2f}", ms); }

void print_row(const std::string& who, const DdpResult& r, std::optional<double> efficiency) {
  fmt::print("{:<22} {:>5} {:>10.2f} {:>11.0f} {:>9} {:>13} {:>16}\n", who, r.ranks, r.step_ms, r.samples_per_s,
             efficiency ? fmt::format("{:.1f} %", *efficiency * 100) : std::string("-"), ms_text(r.allreduce_ms),
             ms_text(r.exposed_comm_ms));
}

Json result_json(const DdpResult& r) {
  Json j = {{"ranks", r.ranks}, {"step_ms", rounded(r.step_ms, 3)}, {"samples_per_s", rounded(r.samples_per_s, 1)}};
  if (r.allreduce_ms >= 0) j["allreduce_ms"] = rounded(r.allreduce_ms, 3);
  if (r.exposed_comm_ms >= 0) j["exposed_comm_ms"] = rounded(r.exposed_comm_ms, 3);
  if (r.slowest_step_ms >= 0) j["slowest_step_ms"] = rounded(r.slowest_step_ms, 3);
  return j;
}

// One round: every configuration once, in a fixed order, so that a machine whose speed drifts (other
// tenants of a VM host) slows all of them alike; rounds repeat the whole sequence.
struct Round {
  DdpResult one, many;
  std::optional<DdpResult> independent, peer_one, peer_many;
};

// Each round in a directory of its own: a run dir that already holds a checkpoint would be resumed.
Round run_round(const DdpBenchOptions& o, const std::filesystem::path& work) {
  std::filesystem::create_directories(work);
  Round r;
  r.one = run_tandem_ranks(o, 1, work);
  r.many = run_tandem_ranks(o, o.ranks, work);
  if (o.ceiling) r.independent = run_independent_ranks(o, o.ranks, work);
  if (o.peer) {
    r.peer_one = run_peer_ranks(o, 1, work);
    r.peer_many = run_peer_ranks(o, o.ranks, work);
  }
  return r;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// The median of each figure over the rounds (each figure on its own).
DdpResult median_of(const std::vector<Round>& rounds, const std::function<const DdpResult&(const Round&)>& pick) {
  std::vector<double> step, samples, allreduce, exposed, slowest;
  for (const Round& r : rounds) {
    const DdpResult& x = pick(r);
    step.push_back(x.step_ms);
    samples.push_back(x.samples_per_s);
    allreduce.push_back(x.allreduce_ms);
    exposed.push_back(x.exposed_comm_ms);
    slowest.push_back(x.slowest_step_ms);
  }
  return {.ranks = pick(rounds[0]).ranks,
          .step_ms = median(step),
          .samples_per_s = median(samples),
          .allreduce_ms = median(allreduce),
          .exposed_comm_ms = median(exposed),
          .slowest_step_ms = median(slowest)};
}

int bench_ddp(const DdpBenchOptions& o) {
  if (o.ranks < 2 || o.ranks > 64)
    fail("--ranks {} is out of range: use 2..64 (1 rank is always measured too)", o.ranks);
  if (o.batch < 1) fail("--batch {} must be positive", o.batch);
  if (o.steps < 20 || o.warmup < 10)
    fail("--steps {} / --warmup {} are too few: use at least 20 / 10", o.steps, o.warmup);
  if (o.rounds < 1 || o.rounds > 20) fail("--rounds {} is out of range: use 1..20", o.rounds);
  if (o.precision == "bf16" && o.device != "cuda")
    fail("--precision bf16 needs --device cuda (CPU ranks train in float32)");
  if (o.cuda_graph && o.device != "cuda") fail("--cuda-graph needs --device cuda (CPU steps are not captured)");
  if (!std::filesystem::exists("/dev/shm/tandem.data." + o.dataset))
    fail(
        "dataset cache '{}' is not in /dev/shm: run `tandem data preload {} --from DIR` first (fashion-mnist for the "
        "cnn; tools/synthetic_cifar.py writes CIFAR-10 files for resnet18), or pass --dataset NAME",
        o.dataset, o.dataset);
  WorkDir work;
  std::vector<Round> rounds;
  rounds.reserve(static_cast<std::size_t>(o.rounds));  // 1..20, checked above
  for (int i = 0; i < o.rounds; ++i) rounds.push_back(run_round(o, work.path() / fmt::format("round-{}", i + 1)));
  const DdpResult one = median_of(rounds, [](const Round& r) -> const DdpResult& { return r.one; });
  const DdpResult many = median_of(rounds, [](const Round& r) -> const DdpResult& { return r.many; });
  const double efficiency = many.samples_per_s / (o.ranks * one.samples_per_s);

  const std::string collectives = o.device == "cuda"
                                      ? std::string("nccl")
                                      : fmt::format("{} (shm progress {})", o.collectives, o.shm_progress);
  fmt::print(
      "\n{} on '{}', {} {}{}, batch {} per rank, one thread per rank, collectives {}, buckets {} MiB then {} MiB; {} "
      "steps after {} warmup; {}\n",
      o.model, o.dataset, o.device, o.precision, o.cuda_graph ? " captured" : "", o.batch, collectives,
      o.bucket_first_mb, o.bucket_mb, o.steps, o.warmup,
      o.rounds == 1 ? std::string("one round") : fmt::format("median of {} rounds", o.rounds));
  fmt::print("{:<22} {:>5} {:>10} {:>11} {:>9} {:>13} {:>16}\n", "", "ranks", "step ms", "samples/s", "scaling",
             "all-reduce ms", "exposed comm ms");
  print_row("tandem", one, std::nullopt);
  print_row("tandem", many, efficiency);
  Json per_round = Json::array();
  for (const Round& r : rounds) {
    Json j = {{"one_rank", result_json(r.one)},
              {"ranks", result_json(r.many)},
              {"scaling_efficiency", rounded(r.many.samples_per_s / (o.ranks * r.one.samples_per_s), 4)}};
    if (r.independent) j["independent_jobs"] = result_json(*r.independent);
    if (r.peer_many) j["peer"] = {{"one_rank", result_json(*r.peer_one)}, {"ranks", result_json(*r.peer_many)}};
    per_round.push_back(std::move(j));
  }
  Json line = {{"bench", "ddp"},
               {"model", o.model},
               {"dataset", o.dataset},
               {"device", o.device},
               {"precision", o.precision},
               {"cuda_graph", o.cuda_graph},
               {"backend", o.device == "cuda" ? std::string("nccl") : o.collectives},
               {"shm_progress", o.shm_progress},
               {"batch_per_rank", o.batch},
               {"threads_per_rank", 1},
               {"steps", o.steps},
               {"warmup", o.warmup},
               {"bucket_first_mb", o.bucket_first_mb},
               {"bucket_mb", o.bucket_mb},
               {"rounds", o.rounds},
               {"one_rank", result_json(one)},
               {"ranks", result_json(many)},
               {"scaling_efficiency", rounded(efficiency, 4)},
               {"per_round", per_round}};
  if (o.ceiling) {
    const DdpResult independent = median_of(rounds, [](const Round& r) -> const DdpResult& { return *r.independent; });
    const double ceiling = independent.samples_per_s / (o.ranks * one.samples_per_s);
    fmt::print("{:<22} {:>5} {:>10.2f} {:>11.0f} {:>9} {:>13} {:>16}\n", "independent 1-rank jobs", o.ranks,
               independent.step_ms, independent.samples_per_s, fmt::format("{:.1f} %", ceiling * 100), "-", "-");
    line["independent_jobs"] = result_json(independent);
    line["contention_ceiling"] = rounded(ceiling, 4);
    // A synchronous step waits for the slowest rank: N ranks in lock step at the slowest job's pace.
    const double lockstep_samples = o.ranks * o.batch * 1e3 / independent.slowest_step_ms;
    const double lockstep = lockstep_samples / (o.ranks * one.samples_per_s);
    fmt::print("{:<22} {:>5} {:>10.2f} {:>11.0f} {:>9} {:>13} {:>16}\n", "  at the slowest's pace", o.ranks,
               independent.slowest_step_ms, lockstep_samples, fmt::format("{:.1f} %", lockstep * 100), "-", "-");
    line["lockstep_ceiling"] = rounded(lockstep, 4);
  }
  if (o.peer) {
    const DdpResult peer_one = median_of(rounds, [](const Round& r) -> const DdpResult& { return *r.peer_one; });
    const DdpResult peer_many = median_of(rounds, [](const Round& r) -> const DdpResult& { return *r.peer_many; });
    const double peer_efficiency = peer_many.samples_per_s / (o.ranks * peer_one.samples_per_s);
    print_row("PyTorch DDP (peer)", peer_one, std::nullopt);
    print_row("PyTorch DDP (peer)", peer_many, peer_efficiency);
    const double ratio = many.samples_per_s / peer_many.samples_per_s;
    fmt::print(
        "\n{} ranks: {:.0f} vs {:.0f} samples/s, {:.2f}x PyTorch DDP; scaling {:.1f} % vs {:.1f} %; one rank: {:.2f} "
        "vs {:.2f} ms a step\n",
        o.ranks, many.samples_per_s, peer_many.samples_per_s, ratio, efficiency * 100, peer_efficiency * 100,
        one.step_ms, peer_one.step_ms);
    line["peer"] = {{"one_rank", result_json(peer_one)},
                    {"ranks", result_json(peer_many)},
                    {"scaling_efficiency", rounded(peer_efficiency, 4)}};
    line["ratio_samples_per_s"] = rounded(ratio, 3);
  }
  if (o.rounds > 1) {
    fmt::print("per round (1 rank / {} ranks samples/s, scaling):", o.ranks);
    for (const Round& r : rounds)
      fmt::print(" {:.0f}/{:.0f} {:.1f} %;", r.one.samples_per_s, r.many.samples_per_s,
                 100 * r.many.samples_per_s / (o.ranks * r.one.samples_per_s));
    fmt::print("\n");
  }
  emit_json_line(line, o.json);
  return 0;
}

}  // namespace

void add_ddp_command(CLI::App& app) {
  static DdpBenchOptions o;
  auto* cmd = app.add_subcommand("ddp", "data-parallel step time and scaling of the learner ranks, 1 and N ranks");
  cmd->add_option("--dataset", o.dataset, "a preloaded dataset cache (the model's input shape comes from it)")
      ->capture_default_str();
  cmd->add_option("--model", o.model, "model.name of the ranks")
      ->check(CLI::IsMember({"cnn", "resnet18"}))
      ->capture_default_str();
  cmd->add_option("--device", o.device, "learner.device of the ranks: cuda puts rank r on GPU r, over NCCL")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  cmd->add_option("--precision", o.precision, "learner.precision of the ranks (bf16: cuda only; the peer autocasts)")
      ->check(CLI::IsMember({"fp32", "bf16"}))
      ->capture_default_str();
  cmd->add_flag("--cuda-graph", o.cuda_graph,
                "learner.cuda_graph of the ranks: each rank's step, its NCCL all-reduces included, captured and "
                "replayed (the peer stays eager)");
  cmd->add_option("--ranks", o.ranks, "ranks of the data-parallel run (beside 1 rank)")->capture_default_str();
  cmd->add_option("--batch", o.batch, "samples per rank per step")->capture_default_str();
  cmd->add_option("--steps", o.steps, "measured steps per run")->capture_default_str();
  cmd->add_option("--warmup", o.warmup, "steps before the measurement")->capture_default_str();
  cmd->add_option("--bucket-first-mb", o.bucket_first_mb, "ddp.bucket_first_mb of the ranks")->capture_default_str();
  cmd->add_option("--bucket-mb", o.bucket_mb, "ddp.bucket_mb of the ranks")->capture_default_str();
  cmd->add_option("--collectives", o.collectives, "ddp.cpu_collectives of the ranks")
      ->check(CLI::IsMember({"shm", "gloo"}))
      ->capture_default_str();
  cmd->add_option("--shm-progress", o.shm_progress, "ddp.shm_progress of the ranks (shared-memory collectives)")
      ->check(CLI::IsMember({"auto", "thread", "caller"}))
      ->capture_default_str();
  cmd->add_option("--rounds", o.rounds, "run every configuration this many times, interleaved; report medians")
      ->capture_default_str();
  cmd->add_option("--json", o.json, "also write the JSON line to this file");
  cmd->add_flag(
      "--ceiling", o.ceiling,
      "also run N independent one-rank jobs at once (on GPUs: job j on GPU j): the scaling the machine allows "
      "with no communication, and with every job held to the slowest one's pace (what a synchronous step allows)");
  cmd->add_flag("--peer", o.peer,
                "also run bench/peers/ddp_peer.py (PyTorch DDP: Gloo on CPUs, NCCL on GPUs) under torchrun and print "
                "ratios");
  cmd->add_option("--python", o.python, "Python with torch, for --peer (runs torch.distributed.run)")
      ->capture_default_str();
  cmd->add_option("--peer-script", o.peer_script, "path of ddp_peer.py (default: found in the source tree)");
  cmd->add_option("--tandem", o.tandem, "the tandem launcher (default: next to tandem-bench)");
  cli::on_run(cmd, [] { return bench_ddp(o); });
}

}  // namespace tandem::bench
