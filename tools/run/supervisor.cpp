#include "tools/run/supervisor.hpp"

#include <signal.h>

#include <fmt/format.h>

#include <algorithm>

#include "common/clock.hpp"
#include "tools/run/child_spec.hpp"
#include "tools/run/supervisor_impl.hpp"

namespace tandem::run {

using shm::ProcessState;
using shm::Role;

namespace {

constexpr auto kTick = std::chrono::milliseconds(100);
constexpr double kLiveRedrawS = 0.5;

RestartLimits limits_of(const JobConfig& cfg) {
  return {.max_restarts = cfg.max_restarts,
          .backoff_s = cfg.restart_backoff_s,
          .backoff_max_s = cfg.restart_backoff_max_s,
          .heartbeat_timeout_s = cfg.heartbeat_timeout_s,
          .start_timeout_s = cfg.start_timeout_s};
}

// Each control-block row's group, learners first: what `tandem status` names the processes by.
std::vector<shm::RowGroup> row_groups(const JobConfig& cfg) {
  std::vector<shm::RowGroup> rows;
  for (const auto& g : cfg.groups) rows.insert(rows.end(), g.count, {.name = g.name, .heartbeat = g.heartbeat});
  return rows;
}

const char* outcome_name(JobResult::Outcome outcome) {
  switch (outcome) {
    case JobResult::Outcome::succeeded: return "succeeded";
    case JobResult::Outcome::interrupted: return "interrupted";
    case JobResult::Outcome::failed: return "failed";
  }
  return "failed";
}

}  // namespace

Supervisor::Supervisor(const JobConfig& config, Job job, Console& console)
    : impl_(std::make_unique<Impl>(config, std::move(job), console)) {}

Supervisor::~Supervisor() = default;

JobResult Supervisor::run() { return impl_->run(); }

Supervisor::Impl::Slot::Slot(Impl& impl, const ProgramGroup& group, std::uint32_t group_index, std::uint32_t row)
    : group(group),
      group_index(group_index),
      role(group.role),
      index(group.first_index + group_index),
      row(row),
      name(fmt::format("{}.{}", group.name, group_index)),
      output(
          impl.io, [this, &impl](std::string_view line, bool is_err) { impl.console.child_line(name, line, is_err); },
          [this, &impl] { impl.complete_exit_if_drained(*this); }),
      restart_timer(impl.io) {}

Supervisor::Impl::Impl(const JobConfig& config, Job job, Console& console)
    : cfg(config),
      limits(limits_of(config)),
      job(std::move(job)),
      console(console),
      started_ns(monotonic_ns()),
      signals(io, SIGINT, SIGTERM, SIGHUP),  // before any segment exists: a Ctrl-C now still cleans up
      child_exits(io, SIGCHLD),
      tick_timer(io),
      segments(JobSegments::create(this->job.id, config.learners, row_groups(config), this->job.run_dir.string())),
      control(segments.control()),
      metrics(this->job.run_dir / "metrics.jsonl", this->job.id, started_ns, control.row_count()),
      stop(cfg.kill_timeout_s) {
  for (const auto& group : cfg.groups)  // in row order (job_groups.hpp)
    for (std::uint32_t i = 0; i < group.count; ++i)
      slots.push_back(std::make_unique<Slot>(*this, group, i, static_cast<std::uint32_t>(slots.size())));
  if (cfg.dashboard || cfg.metrics_port != 0)
    endpoint.emplace(io, cfg.metrics_port, dashboard_routes(this->job.run_dir, &control));
}

JobPhase Supervisor::Impl::phase() const {
  if (!stop.stopping()) return JobPhase::running;
  if (failure) return JobPhase::failed;
  return stop_reason == shm::StopReason::finished ? JobPhase::finishing : JobPhase::stopping;
}

ProcessHistory Supervisor::Impl::history(const Slot& s) const {
  const std::uint64_t now = monotonic_ns();
  return {.role = s.role,
          .restarts = s.restarts,
          .crashes_in_row = s.crashes_in_row,
          .up = std::chrono::nanoseconds(now > s.spawned_ns ? now - s.spawned_ns : 0),
          .last_failure = s.last_failure,
          .same_failures = s.same_failures};
}

void Supervisor::Impl::spawn(Slot& s) {
  control.begin_spawn(s.row, s.restarts);
  s.child = ChildProcess::spawn(child_spec(cfg, job, s.group, s.group_index));
  s.last_pid = s.child.pid();
  control.set_pid(s.row, s.child.pid());
  // A program that never joins cannot say it runs: the launcher says so for it (its row's state is
  // the launcher's: control_block_format.hpp, no_heartbeat).
  if (!s.group.heartbeat) control.set_state(s.row, ProcessState::running);
  s.asked_by_sigterm = false;
  s.spawned_ns = monotonic_ns();
  s.hung.clear();
  s.signalled_for_stop = false;
  s.output.attach(s.child.release_stdout(), s.child.release_stderr());
  metrics.event({{"event", "spawn"}, {"process", s.name}, {"pid", s.last_pid}, {"restarts", s.restarts}});
}

void Supervisor::Impl::tick() {
  reap_all();
  drain_deadlines();
  const std::uint64_t now = monotonic_ns();
  control.job_control().launcher_heartbeat_ns.store(now, std::memory_order_relaxed);
  check_heartbeats();
  for (auto& s : slots)
    if (s->child.running()) note_reported_version(*s);
  if (stop.stopping()) escalate();
  if (now >= next_metrics_ns) {
    metrics.sample(control);
    next_metrics_ns = now + ns_from_s(cfg.metrics_interval_s);
  }
  if (now >= next_status_ns) {
    if (cfg.status != StatusMode::off) console.status(status_text(summarize(control), seconds_since(started_ns)));
    next_status_ns = now + ns_from_s(console.live() ? kLiveRedrawS : cfg.status_interval_s);
  }
  finish_if_done();
  if (finished) return;
  tick_timer.expires_after(kTick);
  tick_timer.async_wait([this](boost::system::error_code ec) {
    if (!ec) tick();
  });
}

void Supervisor::Impl::finish_if_done() {
  if (finished || !stop.stopping()) return;
  // A slot neither running nor done has a restart pending: while the job finishes it still runs.
  if (std::any_of(slots.begin(), slots.end(),
                  [](const auto& s) { return s->child.running() || s->pending_exit || !s->done; }))
    return;
  finished = true;
  io.stop();
}

void Supervisor::Impl::wait_for_signal() {
  signals.async_wait([this](boost::system::error_code ec, int sig) {
    if (ec) return;
    on_signal(sig);
    wait_for_signal();
  });
}

void Supervisor::Impl::wait_for_child_exit() {
  child_exits.async_wait([this](boost::system::error_code ec, int) {
    if (ec) return;
    reap_all();
    wait_for_child_exit();
  });
}

// The learners finished; the job succeeds only if every actor then reported their final version.
std::optional<std::string> Supervisor::Impl::unmet_duty_text() const {
  std::uint64_t final_version = 0;
  std::vector<Duty> duties;
  const std::uint32_t rollout = cfg.settings.rollout_actors;  // they act, they owe no evaluation
  for (const auto& s : slots) {
    if (s->role == Role::learner) final_version = std::max(final_version, s->reported_version);
    else if (s->group.builtin && s->index >= rollout)  // a user group's programs owe only a clean exit
      duties.push_back({.name = s->name, .reported_version = s->reported_version, .last_exit = s->last_exit});
  }
  return unmet_duty(duties, final_version);
}

JobResult Supervisor::Impl::run() {
  std::string shape;
  for (const auto& g : cfg.groups)
    if (g.count > 0 || g.role == Role::learner)
      shape += fmt::format("{}{} {}{}", shape.empty() ? "" : ", ", g.count, g.name, g.count == 1 ? "" : "s");
  console.message(fmt::format("job {}: {}; run dir {}", job.id, shape, job.run_dir.string()));
  if (endpoint) console.message(announce_dashboard(job.run_dir, endpoint->port()));
  wait_for_signal();
  wait_for_child_exit();
  if (!console.live()) next_status_ns = monotonic_ns() + ns_from_s(cfg.status_interval_s);
  for (auto& s : slots) spawn(*s);
  tick();
  io.run();

  metrics.sample(control);
  JobResult r;
  r.summary = summarize(control);
  r.elapsed_s = seconds_since(started_ns);
  if (!failure && interrupt_signal == 0) failure = unmet_duty_text();
  if (failure) {
    r.outcome = JobResult::Outcome::failed;
    r.failure = *failure;
  } else if (interrupt_signal != 0) {
    r.outcome = JobResult::Outcome::interrupted;
    r.signal = interrupt_signal;
  } else {
    r.outcome = JobResult::Outcome::succeeded;
  }
  metrics.event({{"event", "end"}, {"outcome", outcome_name(r.outcome)}});
  if (endpoint) endpoint->close();
  return r;
}

}  // namespace tandem::run
