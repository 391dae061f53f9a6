// `tandem-bench mujoco`: the MuJoCo tasks through VecEnv on K threads against a bare mj_step loop, a
// table and one JSON line (mujoco_options.hpp says what each figure measures).
#include <fmt/format.h>

#include <algorithm>
#include <thread>
#include <vector>

#include "common/error.hpp"
#include "bench/bench_commands.hpp"
#include "bench/mujoco_options.hpp"
#include "common/cli_actions.hpp"

namespace tandem::bench {
namespace {

constexpr double kOverheadGoal = 0.10;

void check_options(const MujocoBenchOptions& o) {
  if (o.envs < 1 || o.envs > 4096) fail("--envs {} is out of range: use 1..4096", o.envs);
  if (o.rounds < 1 || o.rounds > 100) fail("--rounds {} is out of range: use 1..100", o.rounds);
  if (!(o.seconds > 0) || o.seconds > 600)
    fail("--seconds {} is out of range: use a positive number up to 600", o.seconds);
  for (int k : o.threads)
    if (k < 1 || k > o.envs) fail("--threads {} is out of range: use 1..--envs ({})", k, o.envs);
  if (o.batch < 0 || o.batch > o.envs)
    fail("--batch {} is out of range: use 1..--envs ({}), or 0 for none", o.batch, o.envs);
  if (std::find(o.threads.begin(), o.threads.end(), 1) == o.threads.end())
    fail("--threads must include 1: the overhead and the scaling are measured against one thread");
}

std::string kilo(double rate) { return fmt::format("{:.1f} k", rate / 1e3); }

// Each rate the best of the rounds; the steps and episodes add up.
void keep_best(LoopRate& best, const LoopRate& round) {
  best.steps_per_s = std::max(best.steps_per_s, round.steps_per_s);
  best.steps_per_cpu_s = std::max(best.steps_per_cpu_s, round.steps_per_cpu_s);
  best.steps += round.steps;
  best.episodes += round.episodes;
}

// AsyncVecEnv's row at K threads: its scaling against the bare loop on one core, and its share of the
// ceiling of K bare loops.
void print_async(Json& row, int k, const LoopRate& bare, const LoopRate& rate, const LoopRate* ceiling) {
  const double scaling = rate.steps_per_s / bare.steps_per_s;
  const double share = ceiling != nullptr ? rate.steps_per_s / ceiling->steps_per_s : 0.0;
  fmt::print("{:<12} {:>3} {:<22} {:>14} {:>16} {:>13} {:>8.2f}x  (vs the bare loop{})\n", "", "",
             fmt::format("AsyncVecEnv, {} thread{}", k, k == 1 ? "" : "s"), kilo(rate.steps_per_s),
             kilo(rate.steps_per_cpu_s), fmt::format("{:.2f}", rate.episodes_per_1k_steps()), scaling,
             ceiling != nullptr ? fmt::format("; {:.0f}% of the ceiling", 100 * share) : "");
  Json& out = row["async"][std::to_string(k)];
  out = {{"steps_per_s", rounded(rate.steps_per_s, 0)},
         {"steps_per_cpu_s", rounded(rate.steps_per_cpu_s, 0)},
         {"scaling_vs_bare", rounded(scaling, 3)}};
  if (ceiling != nullptr) out["ceiling_share"] = rounded(share, 3);
}

int bench_mujoco(const MujocoBenchOptions& o) {
  check_options(o);
  Json line = {{"bench", "mujoco"},    {"envs", o.envs},     {"batch", o.batch},
               {"seconds", o.seconds}, {"rounds", o.rounds}, {"cores", std::thread::hardware_concurrency()}};
  fmt::print(
      "MuJoCo env steps/s, {} envs, best of {} rounds of {:.1f} s per row ({} cores); an env step is frame_skip "
      "mj_step calls\n",
      o.envs, o.rounds, o.seconds, std::thread::hardware_concurrency());
  fmt::print("{:<12} {:>3} {:<22} {:>14} {:>16} {:>13} {:>9}\n", "task", "fs", "loop", "steps/s wall",
             "steps/s per CPU", "ends/1k steps", "vs K=1");
  for (const std::string& task : o.tasks) {
    const int frame_skip = frame_skip_of(task);
    Json row = {{"frame_skip", frame_skip}};
    std::vector<int> threads = o.threads;
    std::sort(threads.begin(), threads.end());
    threads.erase(std::unique(threads.begin(), threads.end()), threads.end());
    LoopRate bare;
    std::vector<LoopRate> vecs(threads.size()), asyncs(threads.size()), ceilings(threads.size());
    for (int round = 0; round < o.rounds; ++round) {
      keep_best(bare, measure_bare(task, o));
      for (std::size_t i = 0; i < threads.size(); ++i) {
        keep_best(vecs[i], measure_vec_env(task, threads[i], o));
        if (o.batch > 0) keep_best(asyncs[i], measure_async(task, threads[i], o));
        if (threads[i] > 1) keep_best(ceilings[i], measure_bare_ceiling(task, threads[i], o));
      }
    }
    fmt::print("{:<12} {:>3} {:<22} {:>14} {:>16} {:>13} {:>9}\n", task, frame_skip, "bare mj_step, 1 core",
               kilo(bare.steps_per_s), kilo(bare.steps_per_cpu_s), fmt::format("{:.2f}", bare.episodes_per_1k_steps()),
               "");
    row["bare"] = {{"steps_per_s", rounded(bare.steps_per_s, 0)},
                   {"steps_per_cpu_s", rounded(bare.steps_per_cpu_s, 0)},
                   {"episodes_per_1k_steps", rounded(bare.episodes_per_1k_steps(), 3)}};
    const LoopRate& one = vecs[0];  // K = 1: --threads includes it, and it sorts first
    for (std::size_t i = 0; i < threads.size(); ++i) {
      const int k = threads[i];
      const LoopRate& vec = vecs[i];
      const double scaling = vec.steps_per_s / one.steps_per_s;
      fmt::print("{:<12} {:>3} {:<22} {:>14} {:>16} {:>13} {:>8.2f}x\n", "", "",
                 fmt::format("VecEnv, {} thread{}", k, k == 1 ? "" : "s"), kilo(vec.steps_per_s),
                 kilo(vec.steps_per_cpu_s), fmt::format("{:.2f}", vec.episodes_per_1k_steps()), scaling);
      row["vec_env"][std::to_string(k)] = {{"steps_per_s", rounded(vec.steps_per_s, 0)},
                                           {"steps_per_cpu_s", rounded(vec.steps_per_cpu_s, 0)},
                                           {"episodes_per_1k_steps", rounded(vec.episodes_per_1k_steps(), 3)},
                                           {"scaling_vs_1_thread", rounded(scaling, 3)}};
      const LoopRate* ceiling = k > 1 ? &ceilings[i] : nullptr;
      if (ceiling != nullptr) {
        const double host_scaling = ceiling->steps_per_s / bare.steps_per_s;
        fmt::print("{:<12} {:>3} {:<22} {:>14} {:>16} {:>13} {:>8.2f}x  (VecEnv at {:.0f}% of it)\n", "", "",
                   fmt::format("ceiling, {} bare loops", k), kilo(ceiling->steps_per_s), "-",
                   fmt::format("{:.2f}", ceiling->episodes_per_1k_steps()), host_scaling,
                   100 * vec.steps_per_s / ceiling->steps_per_s);
        row["ceiling"][std::to_string(k)] = {{"steps_per_s", rounded(ceiling->steps_per_s, 0)},
                                             {"scaling_vs_bare", rounded(host_scaling, 3)},
                                             {"vec_env_share", rounded(vec.steps_per_s / ceiling->steps_per_s, 3)}};
      }
      if (o.batch > 0) print_async(row, k, bare, asyncs[i], ceiling);
    }
    const double overhead = bare.steps_per_cpu_s / one.steps_per_cpu_s - 1.0;
    const double paired = measure_paired_overhead(task, o);
    row["overhead_1_thread_per_cpu_s"] = rounded(overhead, 4);
    row["overhead_1_thread_paired"] = rounded(paired, 4);
    fmt::print(
        "{:<12} {:>3} engine overhead on one core: {:+.1f}% in alternating turns, {:+.1f}% from the best rates "
        "(goal < {:.0f}%: {})\n",
        "", "", 100 * paired, 100 * overhead, 100 * kOverheadGoal, paired < kOverheadGoal ? "met" : "not met");
    line["tasks"][task] = row;
  }
  emit_json_line(line, o.json);
  return 0;
}

}  // namespace

void add_mujoco_command(CLI::App& app) {
  static MujocoBenchOptions o;
  auto* cmd = app.add_subcommand("mujoco",
                                 "MuJoCo locomotion envs: VecEnv on K threads against a bare mj_step loop on one core");
  cmd->add_option("--tasks", o.tasks, "tasks to time (Hopper, Walker2d, HalfCheetah, Ant, Humanoid)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--envs", o.envs, "envs in the VecEnv and in the bare loop")->capture_default_str();
  cmd->add_option("--threads", o.threads, "VecEnv thread counts, comma-separated; must include 1")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--batch", o.batch,
                  "also time AsyncVecEnv (EnvPool's async mode) on each K, returning batches of this many envs; 0: not")
      ->capture_default_str();
  cmd->add_option("--seconds", o.seconds, "measurement time of each row in each round")->capture_default_str();
  cmd->add_option("--rounds", o.rounds, "rows measured in turn this often; each figure is the best round")
      ->capture_default_str();
  cmd->add_option("--json", o.json, "also write the JSON line to this file");
  cli::on_run(cmd, [] { return bench_mujoco(o); });
}

}  // namespace tandem::bench
