// Reaping the job's processes and carrying out what the policy decides about each exit.
#include <fmt/format.h>

#include <algorithm>

#include "common/clock.hpp"
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

void Supervisor::Impl::on_exit(Slot& s, const ExitStatus& status) {
  const Decision d = decide(Exited{status, s.hung, s.signalled_for_stop}, history(s), phase(), limits);
  const bool ok = status.success() && s.hung.empty();
  control.end_process(s.row, ok ? ProcessState::exited : ProcessState::failed, status.value());
  metrics.event({{"event", "exit"}, {"process", s.name}, {"pid", s.last_pid}, {"status", status.value()},
                 {"hung", !s.hung.empty()}});
  s.done = d.action != Action::restart;
  if (!d.note.empty()) console.message(fmt::format("{} {}", s.name, d.note));
  switch (d.action) {
    case Action::finished:
      if (std::all_of(slots.begin(), slots.end(), [](const auto& o) { return o->role != Role::learner || o->done; }))
        begin_stop(shm::StopReason::finished, cfg.stop_timeout_s);
      break;
    case Action::restart: schedule_restart(s, d); break;
    case Action::fail_job: fail_job(s, d.reason); break;
    case Action::ignore:
    case Action::done:
    case Action::kill_hung: break;  // kill_hung never answers an exit
  }
  finish_if_done();
}

void Supervisor::Impl::schedule_restart(Slot& s, const Decision& d) {
  s.crashes_in_row = d.crashes_in_row;
  ++s.restarts;
  control.set_state(s.row, ProcessState::waiting);
  console.warning(fmt::format("{} (pid {}) {}: restarting it in {:.1f} s (restart {} of at most {})", s.name,
                              s.last_pid, d.reason, d.delay.count() / 1e9, s.restarts, cfg.max_restarts));
  s.restart_timer.expires_after(d.delay);
  s.restart_timer.async_wait([this, &s](boost::system::error_code ec) {
    if (ec || phase() != JobPhase::running || s.done) return;
    spawn(s);
  });
}

void Supervisor::Impl::fail_job(Slot& s, const std::string& what) {
  if (!failure) {
    failure = failure_text(s.name, s.last_pid, what, s.output.tail());
    console.warning(fmt::format("{} (pid {}) {}: stopping the job", s.name, s.last_pid, what));
  }
  begin_stop(shm::StopReason::failure, cfg.kill_timeout_s);
}

}  // namespace tandem::run
