#include "tools/run/job_view.hpp"

#include <fmt/format.h>

#include <cmath>
#include <functional>

#include "common/clock.hpp"
#include "common/process.hpp"
#include "shm/metric_fields.hpp"

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
  const std::uint64_t now = monotonic_ns();
  std::vector<shm::ProcessSnapshot> rows;
  for (std::uint32_t i = 0; i < block.row_count(); ++i) rows.push_back(block.snapshot(i));
  const std::string job = block.job();
  std::string out;
  // One family: a sample line per process that has the figure (NaN: none). A user's program group is
  // one more label; the built-in groups' are their role's.
  auto family = [&](std::string_view name, std::string_view type, std::string_view help,
                    const std::function<double(const shm::ProcessSnapshot&)>& value) {
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
    for (const auto& p : rows) {
      const double v = value(p);
      if (std::isnan(v)) continue;
      const bool user_group = !p.group.empty() && p.group != shm::role_name(p.role);
      out += fmt::format("{}{{job=\"{}\",process=\"{}\",role=\"{}\"{}}} {}\n", name, job, p.name(),
                         shm::role_name(p.role), user_group ? fmt::format(",group=\"{}\"", p.group) : "", v);
    }
  };
  family("tandem_process_up", "gauge", "1 while the process is starting, running or stopping",
         [](const auto& p) { return shm::is_alive(p.state) ? 1.0 : 0.0; });
  family("tandem_process_restarts_total", "counter", "times the launcher restarted the process",
         [](const auto& p) { return static_cast<double>(p.restarts); });
  family("tandem_heartbeat_age_seconds", "gauge", "seconds since the process's last heartbeat", [&](const auto& p) {
    return shm::is_alive(p.state) && p.heartbeat ? (now - std::min(now, p.heartbeat_ns)) / 1e9 : shm::kNaN;
  });
  for (const shm::MetricField& f : shm::kMetricFields)
    if (!f.family.empty())
      family(f.family, f.type, f.help, [&](const shm::ProcessSnapshot& p) {
        if (!p.metrics || !shm::has_metric(*p.metrics, f)) return shm::kNaN;
        return f.kind == shm::MetricKind::measure ? shm::measure_of(*p.metrics, f)
                                                  : static_cast<double>(shm::count_of(*p.metrics, f));
      });
  out += fmt::format(
      "# HELP tandem_stop_requested 1 once the job was asked to stop\n"
      "# TYPE tandem_stop_requested gauge\ntandem_stop_requested{{job=\"{}\"}} {}\n",
      job, block.stop_requested() ? 1 : 0);
  return out;
}

}  // namespace tandem::run
