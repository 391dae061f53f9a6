// `tandem-bench rollout`: (a) the rings, (b) the CartPole job, (c) the Python peers, in one run, then
// ours / theirs and one JSON line. See rollout_options.hpp for what each part measures.
#include <fmt/format.h>

#include <algorithm>

#include "common/error.hpp"
#include "bench/bench_commands.hpp"
#include "bench/peer_process.hpp"
#include "bench/rollout_options.hpp"
#include "common/cli_actions.hpp"

namespace tandem::bench {
namespace {

constexpr double kRingGoal = 10e6, kThroughputGoal = 100e3, kSolveGoal = 8.0;

Json run_rl_peer(const RolloutBenchOptions& o, const char* script, const char* bench_name) {
  const std::string command = fmt::format("{} {} --total-steps {}", shell_quote(o.python),
                                          shell_quote(find_peer_script("", script)), o.peer_steps);
  return run_peer(command, bench_name);
}

double number(const Json& j, const char* key) {
  return j.contains(key) && j.at(key).is_number() ? j.at(key).get<double>() : 0.0;
}

std::string figure(double v, const char* unit) { return v > 0 ? fmt::format("{:.2f} {}", v, unit) : "-"; }

void print_summary(const Json& line) {
  fmt::print("\n{:<40} {:>18} {:>18}\n", "", "env steps/s", "time-to-solve");
  const Json& rings = line.at("rings");
  fmt::print("{:<40} {:>18} {:>18}\n", "(a) null env through the rings, 1 core",
             figure(number(rings, "steps_per_s_per_actor_core") / 1e6, "M"), "-");
  if (line.contains("job")) {
    const Json& job = line.at("job");
    for (const auto& [algo, name] : {std::pair{"ppo", "PPO"}, std::pair{"vtrace", "V-trace"}})
      if (job.at("throughput").contains(algo))
        fmt::print("{:<40} {:>18} {:>18}\n", fmt::format("(b) tandem run, CartPole {}", name),
                   figure(number(job.at("throughput").at(algo), "env_steps_per_s") / 1e3, "k"), "-");
    fmt::print("{:<40} {:>18} {:>18}\n", "(b) tandem run, the example config", "-",
               figure(number(job.at("solve"), "time_to_solve_s"), "s"));
  }
  for (const char* peer : {"cleanrl_ppo_peer", "mp_actor_learner_peer"}) {
    if (!line.contains(peer)) continue;
    const Json& p = line.at(peer);
    fmt::print("{:<40} {:>18} {:>18}\n", fmt::format("(c) {}", peer), figure(number(p, "env_steps_per_s") / 1e3, "k"),
               p.value("solved", false) ? figure(number(p, "time_to_solve_s"), "s") : "not solved");
  }
  const double ring = number(rings, "steps_per_s_per_actor_core");
  fmt::print("\ngoal (a) >= {:.0f} M steps/s per core: {:.2f} M ({})\n", kRingGoal / 1e6, ring / 1e6,
             ring >= kRingGoal ? "met" : "not met");
  if (line.contains("job"))
    for (const auto& [algo, result] : line.at("job").at("throughput").items()) {
      const double rate = number(result, "env_steps_per_s");
      fmt::print("goal (b) >= {:.0f} k steps/s, {}: {:.1f} k ({})\n", kThroughputGoal / 1e3, algo, rate / 1e3,
                 rate >= kThroughputGoal ? "met" : "not met");
    }
  if (line.contains("ratio_time_to_solve_vs_cleanrl")) {
    const double r = number(line, "ratio_time_to_solve_vs_cleanrl");
    fmt::print("goal time-to-solve >= {:.0f}x faster than the CleanRL recipe: {:.1f}x ({})\n", kSolveGoal, r,
               r >= kSolveGoal ? "met" : "not met");
  }
}

// ours / theirs for throughput, theirs / ours for time, where both sides have the figure. Throughput
// is compared with our PPO job: the peers run the same update (4 epochs x 4 minibatches).
void add_ratios(Json& line) {
  if (!line.contains("job")) return;
  const Json& throughput = line.at("job").at("throughput");
  const double ours_rate = throughput.contains("ppo") ? number(throughput.at("ppo"), "env_steps_per_s") : 0.0;
  const double ours_solve = number(line.at("job").at("solve"), "time_to_solve_s");
  for (const auto& [peer, tag] : {std::pair{"cleanrl_ppo_peer", "cleanrl"}, std::pair{"mp_actor_learner_peer", "mp"}}) {
    if (!line.contains(peer)) continue;
    const Json& p = line.at(peer);
    if (ours_rate > 0 && number(p, "env_steps_per_s") > 0)
      line[fmt::format("ratio_env_steps_per_s_vs_{}", tag)] = rounded(ours_rate / number(p, "env_steps_per_s"), 2);
    if (ours_solve > 0 && p.value("solved", false))
      line[fmt::format("ratio_time_to_solve_vs_{}", tag)] = rounded(number(p, "time_to_solve_s") / ours_solve, 2);
  }
}

int bench_rollout(const RolloutBenchOptions& o) {
  if (o.peer && (o.peer_steps < 512 || o.peer_steps > 100000000))
    fail("--peer-steps {} is out of range: use 512..100000000", o.peer_steps);
  Json line = {{"bench", "rollout"}};
  line["rings"] = measure_rings(o);
  if (!o.no_job) line["job"] = measure_job(o);
  if (o.peer) {
    fmt::print("\n(c) the Python peers, CartPole-v1, CleanRL's PPO recipe, budget {} steps\n", o.peer_steps);
    line["cleanrl_ppo_peer"] = run_rl_peer(o, "cleanrl_ppo_peer.py", "cleanrl_ppo_peer");
    line["mp_actor_learner_peer"] = run_rl_peer(o, "mp_actor_learner_peer.py", "mp_actor_learner_peer");
  }
  add_ratios(line);
  print_summary(line);
  emit_json_line(line, o.json);
  return 0;
}

}  // namespace

void add_rollout_command(CLI::App& app) {
  static RolloutBenchOptions o;
  auto* cmd = app.add_subcommand(
      "rollout",
      "RL experience: null env through the rings, CartPole PPO or V-trace through `tandem run`, Python peers");
  cmd->add_option("--envs", o.envs, "(a) null envs per actor thread")->capture_default_str();
  cmd->add_option("--steps", o.steps, "(a) steps per slot")->capture_default_str();
  cmd->add_option("--slots", o.slots, "(a) slots per ring")->capture_default_str();
  cmd->add_option("--actors", o.actors, "(a) actor threads, one ring each; one consumer thread")->capture_default_str();
  cmd->add_option("--seconds", o.seconds, "(a) measurement time")->capture_default_str();
  cmd->add_flag("--no-job", o.no_job, "skip (b), the CartPole jobs through `tandem run`");
  cmd->add_option("--tandem", o.tandem, "(b) the tandem launcher (default: next to tandem-bench)");
  cmd->add_option("--config", o.config, "(b) time-to-solve config (default: examples/cartpole-ppo.toml)");
  cmd->add_option("--seeds", o.seeds, "(b) time-to-solve runs, env.seed 0..N-1; the median is reported")
      ->capture_default_str();
  cmd->add_option("--job-steps", o.job_steps, "(b) rl.total_env_steps of the throughput job")->capture_default_str();
  cmd->add_option("--job-actors", o.job_actors, "(b) rollout actors of the throughput job")->capture_default_str();
  cmd->add_option("--job-learners", o.job_learners, "(b) learner ranks of the throughput job, each on its own actors")
      ->capture_default_str();
  cmd->add_option("--job-device", o.job_device, "(b) learner.device of the throughput job")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  cmd->add_flag("--job-cuda-graph", o.job_cuda_graph,
                "(b) learner.cuda_graph = true in the throughput job: each minibatch step one CUDA graph replay");
  cmd->add_option("--job-slots", o.job_slots, "(b) rl.slots_per_update of the throughput job (0: one per rank)")
      ->capture_default_str();
  cmd->add_option("--job-envs", o.job_envs, "(b) env.envs of the throughput job")->capture_default_str();
  cmd->add_option("--job-rollout-steps", o.job_rollout_steps, "(b) rl.rollout_steps of the throughput job")
      ->capture_default_str();
  cmd->add_option("--job-algo", o.job_algo, "(b) learner.algo of the throughput job, or both")
      ->check(CLI::IsMember({"ppo", "vtrace", "both"}))
      ->capture_default_str();
  cmd->add_option("--job-epochs", o.job_epochs, "(b) rl.update_epochs of the throughput jobs (0: PPO 4, V-trace 1)")
      ->capture_default_str();
  cmd->add_option("--job-minibatches", o.job_minibatches,
                  "(b) rl.minibatches of the throughput jobs (0: PPO 4, V-trace 1)")
      ->capture_default_str();
  cmd->add_flag("--peer", o.peer, "(c) also run bench/peers/cleanrl_ppo_peer.py and mp_actor_learner_peer.py");
  cmd->add_option("--python", o.python, "(c) Python with torch and numpy")->capture_default_str();
  cmd->add_option("--peer-steps", o.peer_steps, "(c) the peers' step budget (they stop once solved)")
      ->capture_default_str();
  cmd->add_option("--json", o.json, "also write the JSON line to this file");
  cli::on_run(cmd, [] { return bench_rollout(o); });
}

}  // namespace tandem::bench
