// Hang checks: each live process's row in the control block, put to the policy every tick.
#include <signal.h>

#include <fmt/format.h>

#include "common/clock.hpp"
#include "tools/run/supervisor_impl.hpp"

namespace tandem::run {

void Supervisor::Impl::check_heartbeats() {
  const std::uint64_t now = monotonic_ns();
  for (auto& s : slots) {
    if (!s->child.running()) continue;
    const auto& row = control.row(s->row);
    const auto state = static_cast<shm::ProcessState>(row.state.load(std::memory_order_relaxed));
    const std::uint64_t beat = row.heartbeat_ns.load(std::memory_order_relaxed);
    const Watched watched{.reported_running = state != shm::ProcessState::starting,
                          .since_heartbeat = std::chrono::nanoseconds(now > beat ? now - beat : 0),
                          .already_killed = !s->hung.empty() || s->signalled_for_stop};
    const Decision d = decide(watched, history(*s), phase(), limits);
    if (d.action != Decision::Action::kill_hung) continue;
    console.warning(fmt::format("{} (pid {}) {}: killing it", s->name, s->last_pid, d.reason));
    s->hung = d.reason;
    s->child.signal(SIGKILL);
  }
}

}  // namespace tandem::run
