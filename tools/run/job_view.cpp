#include "tools/run/job_view.hpp"

#include <fmt/format.h>

#include <cmath>

#include "common/clock.hpp"
#include "common/process.hpp"

namespace tandem::run {

using shm::ProcessState;
using shm::Role;

namespace {

bool alive(ProcessState s) {
  return s == ProcessState::starting || s == ProcessState::running || s == ProcessState::stopping;
}

std::string number(double v, const char* format = "{:.4f}") {
  return std::isnan(v) ? std::string("-") : fmt::format(fmt::runtime(format), v);
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
  for (std::uint32_t i = 0; i < block.row_count(); ++i) {
    const auto p = block.snapshot(i);
    j.restarts += p.restarts;
    if (p.role == Role::learner) {
      ++j.learners;
      if (alive(p.state)) ++j.learners_alive;
      if (!p.metrics) continue;
      if (!std::isnan(p.metrics->samples_per_s))
        j.samples_per_s = (std::isnan(j.samples_per_s) ? 0 : j.samples_per_s) + p.metrics->samples_per_s;
      if (p.index == 0) {
        j.have_learner = true;
        j.step = p.metrics->step;
        j.published_version = p.metrics->version;
        j.loss = p.metrics->loss;
      }
    } else {
      ++j.actors;
      if (alive(p.state)) ++j.actors_alive;
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
  return j;
}

std::string status_text(const JobSummary& j, double elapsed_s) {
  std::string out;
  if (j.have_learner)
    out = fmt::format("step {} | {} samples/s | loss {} | v{}", j.step, human_rate(j.samples_per_s),
                      number(j.loss), j.published_version);
  else
    out = fmt::format("learners {}/{} starting", j.learners_alive, j.learners);
  if (j.have_eval) out += fmt::format(" | eval acc {} (v{})", number(j.eval_accuracy), j.eval_version);
  if (j.actors > 0) out += fmt::format(" | actors {}/{}", j.actors_alive, j.actors);
  out += fmt::format(" | restarts {} | {}", j.restarts, clock_text(elapsed_s));
  return out;
}

std::string status_table(const shm::ControlBlock& block) {
  const auto& d = block.descriptor();
  const std::uint64_t now = monotonic_ns();
  const bool stop = block.stop_requested();
  const std::string launcher =
      process_alive(static_cast<std::uint32_t>(d.launcher_pid))
          ? fmt::format("launcher pid {}", d.launcher_pid)
          : fmt::format("launcher pid {} is gone (`tandem shm gc` removes the job's segments)", d.launcher_pid);
  std::string out = fmt::format("job {}  {}  up {}  stop {}\nrun dir {}\n", d.job, launcher,
                                clock_text((now - d.started_mono_ns) / 1e9),
                                stop ? std::string(shm::stop_reason_name(block.stop_reason())) : "no", d.run_dir);
  out += fmt::format("{:<11} {:>8} {:<10} {:>9} {:>8} {:>8} {:>8} {:>10} {:>9} {:>7} {:>8}\n", "PROCESS", "PID",
                     "STATE", "HEARTBEAT", "RESTARTS", "VERSION", "STEP", "SAMPLES/S", "LOSS", "ACC", "SECONDS");
  for (std::uint32_t i = 0; i < block.row_count(); ++i) {
    const auto p = block.snapshot(i);
    const bool live = alive(p.state);
    const std::string beat = live ? fmt::format("{:.1f}s ago", (now - std::min(now, p.heartbeat_ns)) / 1e9) : "-";
    std::string state(shm::state_name(p.state));
    if (p.state == ProcessState::failed && p.exit_status >= 0) state += fmt::format("({})", p.exit_status);
    const auto& m = p.metrics;
    out += fmt::format("{:<11} {:>8} {:<10} {:>9} {:>8} {:>8} {:>8} {:>10} {:>9} {:>7} {:>8}\n", p.name(),
                       p.pid > 0 ? std::to_string(p.pid) : "-", state, beat, p.restarts,
                       m ? std::to_string(m->version) : std::to_string(p.version_seen),
                       m ? std::to_string(m->step) : "-", m ? human_rate(m->samples_per_s) : "-",
                       m ? number(m->loss) : "-", m ? number(m->accuracy) : "-",
                       m ? number(m->seconds, "{:.3f}") : "-");
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
      if (name == "tandem_process_up") v = alive(p.state) ? 1 : 0;
      else if (name == "tandem_process_restarts_total") v = p.restarts;
      else if (name == "tandem_heartbeat_age_seconds") v = alive(p.state) ? (now - std::min(now, p.heartbeat_ns)) / 1e9 : shm::kNaN;
      else if (!m) continue;
      else if (name == "tandem_step") v = static_cast<double>(m->step);
      else if (name == "tandem_weight_version") v = static_cast<double>(m->version);
      else if (name == "tandem_samples_total") v = static_cast<double>(m->samples);
      else if (name == "tandem_samples_per_second") v = m->samples_per_s;
      else if (name == "tandem_loss") v = m->loss;
      else if (name == "tandem_accuracy") v = m->accuracy;
      else if (name == "tandem_learning_rate") v = m->lr;
      if (std::isnan(v)) continue;
      out += fmt::format("{}{{job=\"{}\",process=\"{}\",role=\"{}\"}} {}\n", f.name, job, p.name(),
                         shm::role_name(p.role), v);
    }
  }
  out += fmt::format("# HELP tandem_stop_requested 1 once the job was asked to stop\n"
                     "# TYPE tandem_stop_requested gauge\ntandem_stop_requested{{job=\"{}\"}} {}\n",
                     job, block.stop_requested() ? 1 : 0);
  return out;
}

}  // namespace tandem::run
