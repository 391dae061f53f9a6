// Reaping the job's processes and carrying out what the policy decides about each exit.
#include <fmt/format.h>
#include <signal.h>

#include <algorithm>

#include "common/clock.hpp"
#include "envs/plugin_env.hpp"
#include "tools/run/supervisor_impl.hpp"

namespace tandem::run {

using shm::ProcessState;
using shm::Role;
using Action = Decision::Action;

namespace {

// A reaped child's exit is handled once its pipes reached end of file, so that its last lines are
// shown (and quoted in a failure) before its exit is reported. A grandchild that keeps a pipe open
// gets this long before the launcher stops waiting for it.
constexpr std::uint64_t kExitDrainNs = 1'000'000'000;

}  // namespace

void Supervisor::Impl::reap_all() {
  for (auto& s : slots) {
    if (auto status = s->child.try_wait()) {
      s->pending_exit = status;
      // Noted now: an exit before the stop is not excused by a stop that comes while its pipes drain.
      s->exited_while_stopping = stop.stopping();
      s->exit_deadline_ns = monotonic_ns() + kExitDrainNs;
      complete_exit_if_drained(*s);
    }
  }
}

void Supervisor::Impl::complete_exit_if_drained(Slot& s) {
  if (!s.pending_exit || s.output.open()) return;
  const ExitStatus status = *s.pending_exit;
  s.pending_exit.reset();
  on_exit(s, status);
}

void Supervisor::Impl::drain_deadlines() {
  const std::uint64_t now = monotonic_ns();
  for (auto& s : slots) {
    if (!s->pending_exit || now < s->exit_deadline_ns) continue;
    s->output.close();
    complete_exit_if_drained(*s);
  }
}

// Actors report the version they evaluated in their metrics record; learners the version they
// published (their last act is version_seen = the final version). Kept over restarts, which clear the row.
void Supervisor::Impl::note_reported_version(Slot& s) {
  std::uint64_t v = 0;
  if (const auto m = control.read_metrics(s.row)) v = m->version;
  if (s.role == Role::learner) v = std::max(v, control.row(s.row).version_seen.load(std::memory_order_relaxed));
  s.reported_version = std::max(s.reported_version, v);
}

void Supervisor::Impl::on_exit(Slot& s, const ExitStatus& reaped) {
  note_reported_version(s);
  // Asked to stop by SIGTERM (it never joins), dying of it or exiting 128 + SIGTERM (a shell) is its
  // clean exit.
  const bool stopped_by_term = s.asked_by_sigterm && !s.signalled_for_stop &&
                               (reaped.signal == SIGTERM || (reaped.signal == 0 && reaped.code == 128 + SIGTERM));
  const ExitStatus status = stopped_by_term ? ExitStatus{} : reaped;
  // A program that said it joins (heartbeat = true) but exited before it did most likely never
  // calls tandem.job(): exit 0 is still its success by the policy, but say what looks wrong.
  const auto state = static_cast<ProcessState>(control.row(s.row).state.load(std::memory_order_relaxed));
  if (s.group.heartbeat && !s.group.builtin && state == ProcessState::starting && !s.signalled_for_stop &&
      s.hung.empty())
    console.warning(fmt::format(
        "{} (pid {}) {} without joining the job: if it never calls `with tandem.job() as job:`, set heartbeat = "
        "false in {}",
        s.name, s.last_pid, status.describe(), group_table(s.group)));
  const auto& tail = s.output.tail().lines();
  const Exited exited{.status = status,
                      .hung = s.hung,
                      .signalled_for_stop = s.signalled_for_stop,
                      .last_line = tail.empty() ? std::string() : tail.back(),
                      .stopped_while_starting = s.exited_while_stopping && state == ProcessState::starting};
  Decision d = decide(exited, history(s), phase(), limits);
  // An actor stepping a user's env plugin that dies by a fault signal most likely died inside it: the
  // line says so and what to do, rather than leave the user to guess from "killed by SIGSEGV".
  const int sig = status.signal;
  const std::string& plugin = cfg.settings.env.plugin;  // set only for env.name = "plugin"
  if (s.role == Role::actor && !plugin.empty() && !s.signalled_for_stop &&
      (sig == SIGSEGV || sig == SIGBUS || sig == SIGILL || sig == SIGFPE || sig == SIGABRT))
    d.reason += "; " + envs::plugin_crash_message(plugin, sig);
  const bool ok = status.success() && s.hung.empty();
  s.last_exit = s.hung.empty() ? status.describe() : s.hung;
  control.end_process(s.row, ok ? ProcessState::exited : ProcessState::failed, status.value());
  metrics.event({{"event", "exit"},
                 {"process", s.name},
                 {"pid", s.last_pid},
                 {"status", status.value()},
                 {"hung", !s.hung.empty()}});
  s.done = d.action != Action::restart;
  if (!d.note.empty()) console.message(fmt::format("{} {}", s.name, d.note));
  switch (d.action) {
    case Action::finished:
      if (std::all_of(slots.begin(), slots.end(), [](const auto& o) { return o->role != Role::learner || o->done; }))
        begin_stop(shm::StopReason::finished, cfg.stop_timeout_s);
      break;
    case Action::restart: schedule_restart(s, d); break;
    case Action::fail_job: fail_job(s, d.reason, status); break;
    case Action::ignore:
    case Action::done:
    case Action::kill_hung: break;  // kill_hung never answers an exit
  }
  finish_if_done();
}

void Supervisor::Impl::schedule_restart(Slot& s, const Decision& d) {
  s.crashes_in_row = d.crashes_in_row;
  s.last_failure = d.failure;
  s.same_failures = d.same_failures;
  ++s.restarts;
  control.set_state(s.row, ProcessState::waiting);
  console.warning(fmt::format("{} (pid {}) {}: restarting it in {:.1f} s (restart {} of at most {})", s.name,
                              s.last_pid, d.reason, d.delay.count() / 1e9, s.restarts, cfg.max_restarts));
  s.restart_timer.expires_after(d.delay);
  s.restart_timer.async_wait([this, &s](boost::system::error_code ec) {
    if (ec || s.done) return;
    // A job that finishes still restarts actors (they owe the final version); any other stop does not.
    if (phase() != JobPhase::running && phase() != JobPhase::finishing) {
      s.done = true;
      finish_if_done();
      return;
    }
    spawn(s);
  });
}

void Supervisor::Impl::fail_job(Slot& s, const std::string& what, const ExitStatus& status) {
  // A rank that loses a peer exits with an error at once, often before the dead peer's exit is handled
  // (its pipes drain first). The rank that was killed or hung is the cause: it takes the job's failure
  // over from a rank that only exited with an error, so the report names it and quotes its last lines.
  const bool rank = s.role == Role::learner && cfg.world_size() > 1;
  const bool died = !s.signalled_for_stop && (status.signal != 0 || !s.hung.empty());
  if (!failure || (failure_may_be_echo && rank && died)) {
    failure_may_be_echo = rank && !died;
    failure = failure_text(s.name, s.last_pid, what, s.output.tail());
    console.warning(fmt::format("{} (pid {}) {}: stopping the job", s.name, s.last_pid, what));
  }
  begin_stop(shm::StopReason::failure, cfg.kill_timeout_s);
}

}  // namespace tandem::run
