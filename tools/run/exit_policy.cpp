#include "tools/run/exit_policy.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace tandem::run {

using shm::Role;
using Action = Decision::Action;

std::string format_seconds(double s) { return s == std::floor(s) ? fmt::format("{:.0f}", s) : fmt::format("{}", s); }

namespace {

std::chrono::nanoseconds from_seconds(double s) { return std::chrono::nanoseconds(static_cast<std::int64_t>(s * 1e9)); }

Decision make(Action action, std::string reason = {}) {
  Decision d;
  d.action = action;
  d.reason = std::move(reason);
  return d;
}

Decision restart_or_fail(const Exited& e, const ProcessHistory& p, const std::string& what,
                         const RestartLimits& limits) {
  // A crash after a long enough run starts a new streak: the backoff is for crash loops.
  const double up_s = p.up.count() / 1e9;
  const std::uint32_t streak = up_s > std::max(60.0, 2 * limits.backoff_max_s) ? 0 : p.crashes_in_row;
  if (p.restarts >= limits.max_restarts)
    return make(Action::fail_job, fmt::format("{}, and it has been restarted {} times already (run.max_restarts = {})",
                                              what, p.restarts, limits.max_restarts));
  const std::string signature = failure_signature(e);
  const std::uint32_t same = signature == p.last_failure ? p.same_failures + 1 : 1;
  if (same >= kSameFailureLimit)
    return make(Action::fail_job, fmt::format("{} {} times in a row, the same way each time: restarting it again would "
                                              "not help",
                                              what, same));
  const double delay_s = std::min(limits.backoff_s * std::pow(2.0, streak), limits.backoff_max_s);
  Decision d = make(Action::restart, what);
  d.delay = from_seconds(delay_s);
  d.crashes_in_row = streak + 1;
  d.failure = signature;
  d.same_failures = same;
  return d;
}

Decision on_exit(const Exited& e, const ProcessHistory& p, JobPhase phase, const RestartLimits& limits) {
  const bool ok = e.status.success() && e.hung.empty();
  std::string what = e.hung.empty() ? e.status.describe() : e.hung;
  if (!ok && e.signalled_for_stop) what = "did not exit after the stop request and " + what;
  if (phase == JobPhase::stopping && !ok && e.stopped_while_starting && !e.signalled_for_stop && e.hung.empty()) {
    Decision d = make(Action::done);
    d.note = what + " while still starting: the job was asked to stop first, so it was stopped, not failed";
    return d;
  }

  if (p.role == Role::learner) {
    if (!ok) return make(Action::fail_job, what);
    if (phase != JobPhase::running) return make(Action::done);
    Decision d = make(Action::finished);
    d.note = "finished";
    return d;
  }
  if (phase == JobPhase::failed) return make(Action::done);  // the first failure is the one reported
  if (phase == JobPhase::stopping) {
    if (ok) return make(Action::done);
    return make(Action::fail_job, e.signalled_for_stop ? what : what + " while stopping");
  }
  if (phase == JobPhase::finishing) {  // its duty (the final version) is still owed: restart it
    if (ok) return make(Action::done);
    if (e.signalled_for_stop) return make(Action::fail_job, what);
    return restart_or_fail(e, p, what + " before it reported the final version", limits);
  }
  if (!ok) return restart_or_fail(e, p, what, limits);
  Decision d = make(Action::done);
  d.note = "exited with status 0; it is done and not restarted";
  return d;
}

Decision on_watch(const Watched& w, const ProcessHistory& p, const RestartLimits& limits) {
  if (w.already_killed) return make(Action::ignore);
  if (!w.reported_running) {
    if (limits.start_timeout_s > 0 && p.up > from_seconds(limits.start_timeout_s))
      return make(Action::kill_hung,
                  fmt::format("did not report itself running within {} s of its start (run.start_timeout_s)",
                              format_seconds(limits.start_timeout_s)));
    return make(Action::ignore);
  }
  if (limits.heartbeat_timeout_s > 0 && w.since_heartbeat > from_seconds(limits.heartbeat_timeout_s))
    return make(Action::kill_hung,
                fmt::format("hung: no heartbeat for {:.1f} s (run.heartbeat_timeout_s = {})",
                            w.since_heartbeat.count() / 1e9, format_seconds(limits.heartbeat_timeout_s)));
  return make(Action::ignore);
}

}  // namespace

std::string failure_signature(const Exited& e) {
  return fmt::format("{}|{}|{}", e.hung.empty() ? e.status.describe() : "hung", e.signalled_for_stop, e.last_line);
}

std::optional<std::string> unmet_duty(const std::vector<Duty>& actors, std::uint64_t final_version) {
  std::string missing;
  for (const Duty& a : actors) {
    if (a.reported_version >= final_version) continue;
    if (!missing.empty()) missing += "; ";
    const std::string last = a.reported_version == 0 ? "it reported no version"
                                                     : fmt::format("its last was version {}", a.reported_version);
    missing += fmt::format("{} never evaluated the final version {}: {}, and it {}", a.name, final_version, last,
                           a.last_exit.empty() ? "never exited" : a.last_exit);
  }
  if (missing.empty()) return std::nullopt;
  return missing;
}

Decision decide(const ProcessEvent& event, const ProcessHistory& process, JobPhase phase, const RestartLimits& limits) {
  if (const auto* exited = std::get_if<Exited>(&event)) return on_exit(*exited, process, phase, limits);
  return on_watch(std::get<Watched>(event), process, limits);
}

}  // namespace tandem::run
