// Stopping the job: the control block's stop request, then SIGTERM and SIGKILL for processes that
// do not exit in time, hurried by further signals to the launcher.
#include <signal.h>

#include <fmt/format.h>

#include "common/clock.hpp"
#include "tools/run/supervisor_impl.hpp"

namespace tandem::run {

void Supervisor::Impl::begin_stop(shm::StopReason reason, double grace_s) {
  // A job that finishes keeps its pending restarts: those actors still owe the final version.
  if (reason != shm::StopReason::finished) cancel_pending_restarts();
  if (!stop.begin(monotonic_ns(), grace_s)) return;  // already stopping: only sooner
  stop_reason = reason;
  control.request_stop(reason);
  // A program that never joins cannot see the stop flag: SIGTERM is its stop request, as under
  // torchrun or Slurm, and exiting on it is a clean exit (supervisor_exits.cpp).
  for (auto& s : slots) {
    if (s->group.heartbeat || !s->child.running()) continue;
    s->asked_by_sigterm = true;
    s->child.signal(SIGTERM);
  }
  metrics.event({{"event", "stop"}, {"reason", std::string(shm::stop_reason_name(reason))}});
}

void Supervisor::Impl::cancel_pending_restarts() {
  for (auto& s : slots) {
    s->restart_timer.cancel();
    if (!s->child.running()) s->done = true;  // a restart that was pending will not happen
  }
}

void Supervisor::Impl::escalate() {
  auto send = [&](int sig) {
    for (auto& s : slots) {
      if (!s->child.running()) continue;
      if (!s->signalled_for_stop)
        console.warning(fmt::format("{} (pid {}) has not exited: sending {}", s->name, s->last_pid, signal_name(sig)));
      s->signalled_for_stop = true;
      s->child.signal(sig);
    }
  };
  const auto due = stop.due(monotonic_ns());
  if (due.term) send(SIGTERM);
  if (due.kill) {
    for (auto& s : slots) s->signalled_for_stop = false;  // say it again, with SIGKILL
    send(SIGKILL);
  }
}

void Supervisor::Impl::on_signal(int sig) {
  ++signals_received;
  if (signals_received == 1) {
    // A signal while the job already ends (finished, failed) only hurries it; it decides nothing.
    if (phase() == JobPhase::running) interrupt_signal = sig;
    console.message(
        fmt::format("{}: asking the job to stop (learners checkpoint); {} s until SIGTERM, "
                    "or interrupt again to terminate now",
                    signal_name(sig), format_seconds(cfg.stop_timeout_s)));
    begin_stop(shm::StopReason::interrupted, cfg.stop_timeout_s);
  } else if (signals_received == 2) {
    console.message(fmt::format("{} again: terminating every process now", signal_name(sig)));
    stop.terminate_now(monotonic_ns());
  } else {
    stop.kill_now(monotonic_ns());
  }
  escalate();
}

}  // namespace tandem::run
