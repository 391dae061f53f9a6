#include "tools/run/job_view.hpp"

#include <fmt/format.h>

#include <cmath>

#include "common/clock.hpp"
#include "common/process.hpp"

namespace tandem::run {

using shm::ProcessState;
using shm::Role;

namespace {

std::string number(double v, const char* format = "{:.4f}") {
  return std::isnan(v) ? std::string("-") : fmt::format(fmt::runtime(format), v);
}

// NaN-aware accumulations: a field nobody reported stays NaN.
void add_to(double& sum, double v) {
  if (!std::isnan(v)) sum = (std::isnan(sum) ? 0 : sum) + v;
}
void max_to(double& m, double v) {
  if (!std::isnan(v) && (std::isnan(m) || v > m)) m = v;
}

// The RL and data-parallel figures of one process that are present, for the table's last column.
std::string extra_text(const shm::ProcessMetrics& m) {
  std::string out;
  auto put = [&](const char* label, double v, const char* format) {
    if (!std::isnan(v)) out += fmt::format(fmt::runtime(std::string(out.empty() ? "" : " ") + label + " " + format), v);
  };
  if (!std::isnan(m.env_steps_per_s)) out = "env/s " + human_rate(m.env_steps_per_s);
  put("return", m.episode_return, "{:.1f}");
  put("len", m.episode_length, "{:.0f}");
  put("lag", m.policy_lag_avg, "{:.2f}");
  if (m.ring_full_waits > 0) out += fmt::format("{}ring waits {}", out.empty() ? "" : " ", m.ring_full_waits);
  put("allreduce", m.allreduce_s, "{:.3f}s");
  put("exposed", m.exposed_comm_s, "{:.3f}s");
  // Where the time went: an actor's env, policy and ring wait; the learner's update and wait for slots.
  const bool actor = !std::isnan(m.env_share);
  put("| env", m.env_share * 100, "{:.0f}%");
  put(actor ? "policy" : "| update", m.compute_share * 100, "{:.0f}%");
  put(actor ? "ring wait" : "slot wait", m.wait_share * 100, "{:.0f}%");
  return out;
}

}  // namespace

std::string human_rate(double v) {
  if (std::isnan(v)) return "-";
  if (v >= 1e6) return fmt::format("{:.2f}M", v / 1e6);
  if (v >= 1e3) return fmt::format("{:.1f}k", v / 1e3);
  return fmt::format("{:.0f}", v);
}

std::string clock_text(double seconds) {
  auto s = static_cast<long>(std::max(0.0, seconds));
  if (s >= 3600) return fmt::format("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60);
  return fmt::format("{}:{:02}", s / 60, s % 60);
}

JobSummary summarize(const shm::ControlBlock& block) {
  JobSummary j;
  std::uint64_t newest_eval_ns = 0;
  double learner_env_steps_per_s = shm::kNaN, actors_env_steps_per_s = shm::kNaN;
  for (std::uint32_t i = 0; i < block.row_count(); ++i) {
    const auto p = block.snapshot(i);
    j.restarts += p.restarts;
    if (p.role == Role::learner) {
      ++j.learners;
      if (shm::is_alive(p.state)) ++j.learners_alive;
      if (!p.metrics) continue;
      const auto& m = *p.metrics;
      add_to(j.samples_per_s, m.samples_per_s);
      max_to(j.rank_step_s, m.seconds);
      max_to(j.rank_allreduce_s, m.allreduce_s);
      max_to(j.rank_exposed_s, m.exposed_comm_s);
      if (p.index == 0) {
        j.have_learner = true;
        j.step = m.step;
        j.published_version = m.version;
        j.loss = m.loss;
        learner_env_steps_per_s = m.env_steps_per_s;
        j.episode_return = m.episode_return;
        j.policy_lag_avg = m.policy_lag_avg;
      }
    } else {
      const bool user_group = !p.group.empty() && p.group != shm::role_name(p.role);
      if (user_group) {
        if (j.groups.empty() || j.groups.back().name != p.group) j.groups.push_back({.name = p.group});
        ++j.groups.back().count;
        if (shm::is_alive(p.state)) ++j.groups.back().alive;
      } else {
        ++j.actors;
        if (shm::is_alive(p.state)) ++j.actors_alive;
      }
      if (p.metrics) add_to(actors_env_steps_per_s, p.metrics->env_steps_per_s);
      if (!p.metrics || std::isnan(p.metrics->accuracy)) continue;
      // The newest evaluated version; among equals, the latest report.
      const bool newer = !j.have_eval || p.metrics->version > j.eval_version ||
                         (p.metrics->version == j.eval_version && p.metrics->updated_ns > newest_eval_ns);
      if (newer) {
        j.have_eval = true;
        j.eval_version = p.metrics->version;
        j.eval_accuracy = p.metrics->accuracy;
        j.eval_loss = p.metrics->loss;
        newest_eval_ns = p.metrics->updated_ns;
      }
    }
  }
  j.env_steps_per_s = std::isnan(learner_env_steps_per_s) ? actors_env_steps_per_s : learner_env_steps_per_s;
  if (j.learners < 2) j.rank_step_s = j.rank_allreduce_s = j.rank_exposed_s = shm::kNaN;
  return j;
}

std::string status_text(const JobSummary& j, double elapsed_s) {
  std::string out;
  const bool rl = !std::isnan(j.env_steps_per_s) || !std::isnan(j.episode_return);
  if (j.have_learner && rl)
    out = fmt::format("step {} | {} env steps/s | return {} | lag {} | loss {} | v{}", j.step,
                      human_rate(j.env_steps_per_s), number(j.episode_return, "{:.1f}"),
                      number(j.policy_lag_avg, "{:.2f}"), number(j.loss), j.published_version);
  else if (j.have_learner)
    out = fmt::format("step {} | {} samples/s | loss {} | v{}", j.step, human_rate(j.samples_per_s), number(j.loss),
                      j.published_version);
  else out = fmt::format("learners {}/{} starting", j.learners_alive, j.learners);
  if (!std::isnan(j.rank_step_s))
    out += fmt::format(" | slowest rank: step {} all-reduce {} exposed {}", number(j.rank_step_s, "{:.3f}s"),
                       number(j.rank_allreduce_s, "{:.3f}s"), number(j.rank_exposed_s, "{:.3f}s"));
  if (j.have_eval) out += fmt::format(" | eval acc {} (v{})", number(j.eval_accuracy), j.eval_version);
  if (j.actors > 0) out += fmt::format(" | actors {}/{}", j.actors_alive, j.actors);
  for (const auto& g : j.groups) out += fmt::format(" | {} {}/{}", g.name, g.alive, g.count);
  out += fmt::format(" | restarts {} | {}", j.restarts, clock_text(elapsed_s));
  return out;
}

std::string status_table(const shm::ControlBlock& block) {
  const auto& d = block.descriptor();
  const std::uint64_t now = monotonic_ns();
  const bool stop = block.stop_requested();
  const std::string launcher = process_alive(static_cast<std::uint32_t>(d.launcher_pid))
                                   ? fmt::format("launcher pid {}", d.launcher_pid)
                                   : fmt::format("launcher pid {} is gone (`tandem shm gc` removes the job's segments)",
                                                 d.launcher_pid);
  std::string out = fmt::format("job {}  {}  up {}  stop {}\nrun dir {}\n", d.job, launcher,
                                clock_text((now - d.started_mono_ns) / 1e9),
                                stop ? std::string(shm::stop_reason_name(block.stop_reason())) : "no", d.run_dir);
  if (const std::string url = dashboard_url(d.run_dir); !url.empty()) out += fmt::format("dashboard {}\n", url);
  out += fmt::format("{:<11} {:>8} {:<10} {:>9} {:>8} {:>8} {:>8} {:>10} {:>9} {:>7} {:>8}  {}\n", "PROCESS", "PID",
                     "STATE", "HEARTBEAT", "RESTARTS", "VERSION", "STEP", "SAMPLES/S", "LOSS", "ACC", "SECONDS",
                     "RL / RANK");
  for (std::uint32_t i = 0; i < block.row_count(); ++i) {
    const auto p = block.snapshot(i);
    const bool live = shm::is_alive(p.state);
    const std::string beat = !live          ? "-"
                             : !p.heartbeat ? "none"  // heartbeat = false: supervised by exit status only
                                            : fmt::format("{:.1f}s ago", (now - std::min(now, p.heartbeat_ns)) / 1e9);
    std::string state(shm::state_name(p.state));
    if (p.state == ProcessState::failed && p.exit_status >= 0) state += fmt::format("({})", p.exit_status);
    const auto& m = p.metrics;
    out += fmt::format("{:<11} {:>8} {:<10} {:>9} {:>8} {:>8} {:>8} {:>10} {:>9} {:>7} {:>8}  {}\n", p.name(),
                       p.pid > 0 ? std::to_string(p.pid) : "-", state, beat, p.restarts,
                       m ? std::to_string(m->version) : std::to_string(p.version_seen),
                       m ? std::to_string(m->step) : "-", m ? human_rate(m->samples_per_s) : "-",
                       m ? number(m->loss) : "-", m ? number(m->accuracy) : "-", m ? number(m->seconds, "{:.3f}") : "-",
                       m ? extra_text(*m) : "");
  }
  out += status_text(summarize(block), (now - d.started_mono_ns) / 1e9) + "\n";
  return out;
}

std::string prometheus_text(const shm::ControlBlock& block) {
  struct Family {
    const char* name;
    const char* type;
    const char* help;
  };
  static const Family kFamilies[] = {
      {"tandem_process_up", "gauge", "1 while the process is starting, running or stopping"},
      {"tandem_process_restarts_total", "counter", "times the launcher restarted the process"},
      {"tandem_heartbeat_age_seconds", "gauge", "seconds since the process's last heartbeat"},
      {"tandem_step", "counter", "learner: optimizer steps; actor: evaluations done"},
      {"tandem_weight_version", "gauge", "learner: latest published weight version; actor: version evaluated last"},
      {"tandem_samples_total", "counter", "learner: samples trained on; actor: samples in the last evaluation"},
      {"tandem_samples_per_second", "gauge", "throughput"},
      {"tandem_loss", "gauge", "learner: training loss; actor: test loss"},
      {"tandem_accuracy", "gauge", "learner: training accuracy; actor: test accuracy"},
      {"tandem_learning_rate", "gauge", "learner: current learning rate"},
      {"tandem_step_seconds", "gauge", "learner: seconds of the last step; actor: of the last evaluation"},
      {"tandem_env_steps_total", "counter", "RL: environment steps (learner: trained on; actor: stepped)"},
      {"tandem_env_steps_per_second", "gauge", "RL: environment steps per second"},
      {"tandem_episode_return", "gauge", "RL: mean return of recently finished episodes"},
      {"tandem_episode_length", "gauge", "RL: mean length of recently finished episodes"},
      {"tandem_policy_lag", "gauge", "RL: learner version minus behaviour version, average of the last update"},
      {"tandem_policy_lag_max", "gauge", "RL: the largest policy lag of the last update"},
      {"tandem_ring_full_waits_total", "counter", "RL actor: times its experience ring was full"},
      {"tandem_allreduce_seconds", "gauge", "data-parallel rank: all-reduce time of the last step"},
      {"tandem_exposed_comm_seconds", "gauge", "data-parallel rank: communication not hidden behind backward"},
      {"tandem_env_share", "gauge", "RL actor: share of its time stepping its envs"},
      {"tandem_compute_share", "gauge", "RL actor: share of its time in its policy; RL learner: in its updates"},
      {"tandem_wait_share", "gauge", "RL actor: share of its time waiting on a full ring; RL learner: for slots"},
  };
  const std::uint64_t now = monotonic_ns();
  std::vector<shm::ProcessSnapshot> rows;
  for (std::uint32_t i = 0; i < block.row_count(); ++i) rows.push_back(block.snapshot(i));
  const std::string job = block.job();
  std::string out;
  for (const auto& f : kFamilies) {
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", f.name, f.help, f.name, f.type);
    for (const auto& p : rows) {
      const std::string name(f.name);
      double v = shm::kNaN;
      const auto& m = p.metrics;
      if (name == "tandem_process_up") v = shm::is_alive(p.state) ? 1 : 0;
      else if (name == "tandem_process_restarts_total") v = p.restarts;
      else if (name == "tandem_heartbeat_age_seconds")
        v = shm::is_alive(p.state) && p.heartbeat ? (now - std::min(now, p.heartbeat_ns)) / 1e9 : shm::kNaN;
      else if (!m) continue;
      else if (name == "tandem_step") v = static_cast<double>(m->step);
      else if (name == "tandem_weight_version") v = static_cast<double>(m->version);
      else if (name == "tandem_samples_total") v = static_cast<double>(m->samples);
      else if (name == "tandem_samples_per_second") v = m->samples_per_s;
      else if (name == "tandem_loss") v = m->loss;
      else if (name == "tandem_accuracy") v = m->accuracy;
      else if (name == "tandem_learning_rate") v = m->lr;
      else if (name == "tandem_step_seconds") v = m->seconds;
      else if (name == "tandem_env_steps_total") v = m->env_steps > 0 ? static_cast<double>(m->env_steps) : shm::kNaN;
      else if (name == "tandem_env_steps_per_second") v = m->env_steps_per_s;
      else if (name == "tandem_episode_return") v = m->episode_return;
      else if (name == "tandem_episode_length") v = m->episode_length;
      else if (name == "tandem_policy_lag") v = m->policy_lag_avg;
      else if (name == "tandem_policy_lag_max") v = m->policy_lag_max;
      else if (name == "tandem_ring_full_waits_total")
        v = m->ring_full_waits > 0 ? static_cast<double>(m->ring_full_waits) : shm::kNaN;
      else if (name == "tandem_allreduce_seconds") v = m->allreduce_s;
      else if (name == "tandem_exposed_comm_seconds") v = m->exposed_comm_s;
      else if (name == "tandem_env_share") v = m->env_share;
      else if (name == "tandem_compute_share") v = m->compute_share;
      else if (name == "tandem_wait_share") v = m->wait_share;
      if (std::isnan(v)) continue;
      // A user's program group is one more label; the built-in groups' are their role's.
      const bool user_group = !p.group.empty() && p.group != shm::role_name(p.role);
      out += fmt::format("{}{{job=\"{}\",process=\"{}\",role=\"{}\"{}}} {}\n", f.name, job, p.name(),
                         shm::role_name(p.role), user_group ? fmt::format(",group=\"{}\"", p.group) : "", v);
    }
  }
  out += fmt::format(
      "# HELP tandem_stop_requested 1 once the job was asked to stop\n"
      "# TYPE tandem_stop_requested gauge\ntandem_stop_requested{{job=\"{}\"}} {}\n",
      job, block.stop_requested() ? 1 : 0);
  return out;
}

}  // namespace tandem::run
