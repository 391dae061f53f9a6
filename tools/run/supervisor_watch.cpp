// Hang checks: each live process's row in the control block, put to the policy every tick.
#include <signal.h>

#include <fmt/format.h>

#include "common/clock.hpp"
#include "tools/run/supervisor_impl.hpp"

namespace tandem::run {
namespace {

// A hung rank stalls every other rank at its next collective, and they give up after
// learner.collective_timeout_s naming it only in their own last lines (they keep beating while they
// wait). So the launcher looks for a rank's hang sooner, at half that timeout, and the failure it
// reports names the hung rank itself.
RestartLimits watch_limits(const JobConfig& cfg, RestartLimits limits, shm::Role role, std::string& why) {
  const double sooner = cfg.collective_timeout_s / 2;
  if (role != shm::Role::learner || cfg.world_size() < 2 || limits.heartbeat_timeout_s <= sooner) return limits;
  limits.heartbeat_timeout_s = sooner;
  why = fmt::format(" (learner ranks: at most half of learner.collective_timeout_s = {})",
                    format_seconds(cfg.collective_timeout_s));
  return limits;
}

}  // namespace

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
    std::string why;
    const Decision d = decide(watched, history(*s), phase(), watch_limits(cfg, limits, s->role, why));
    if (d.action != Decision::Action::kill_hung) continue;
    console.warning(fmt::format("{} (pid {}) {}{}: killing it", s->name, s->last_pid, d.reason, why));
    s->hung = d.reason + why;
    s->child.signal(SIGKILL);
  }
}

}  // namespace tandem::run
