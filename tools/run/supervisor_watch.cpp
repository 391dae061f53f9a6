// Hang checks: each live process's row in the control block, put to the policy every tick.
#include <signal.h>

#include <fmt/format.h>

#include "common/clock.hpp"
#include "tools/run/supervisor_impl.hpp"

namespace tandem::run {
namespace {

// A hung rank stalls every other rank at its next collective, and they give up after
// ddp.collective_timeout_s naming it only in their own last lines (they keep beating while they
// wait). So the launcher looks for a rank's hang sooner, at half that timeout, and the failure it
// reports names the hung rank itself.
RestartLimits watch_limits(const JobConfig& cfg, RestartLimits limits, shm::Role role) {
  const double sooner = cfg.settings.ddp.collective_timeout_s / 2;
  if (role == shm::Role::learner && cfg.world_size() > 1 && limits.heartbeat_timeout_s > sooner)
    limits.heartbeat_timeout_s = sooner;
  return limits;
}

// The policy names run.heartbeat_timeout_s as the limit; say which limit it really was.
std::string name_the_limit(std::string reason, const JobConfig& cfg, const RestartLimits& used,
                           const RestartLimits& set) {
  if (used.heartbeat_timeout_s == set.heartbeat_timeout_s) return reason;
  const std::string from = fmt::format("run.heartbeat_timeout_s = {}", format_seconds(used.heartbeat_timeout_s));
  if (const auto at = reason.find(from); at != std::string::npos)
    reason.replace(at, from.size(),
                   fmt::format("learner ranks: half of ddp.collective_timeout_s = {}",
                               format_seconds(cfg.settings.ddp.collective_timeout_s)));
  return reason;
}

}  // namespace

void Supervisor::Impl::check_heartbeats() {
  const std::uint64_t now = monotonic_ns();
  for (auto& s : slots) {
    if (!s->child.running() || !s->group.heartbeat) continue;  // heartbeat = false: its exit status only
    const auto& row = control.row(s->row);
    const auto state = static_cast<shm::ProcessState>(row.state.load(std::memory_order_relaxed));
    const std::uint64_t beat = row.heartbeat_ns.load(std::memory_order_relaxed);
    const Watched watched{.reported_running = state != shm::ProcessState::starting,
                          .since_heartbeat = std::chrono::nanoseconds(now > beat ? now - beat : 0),
                          .already_killed = !s->hung.empty() || s->signalled_for_stop};
    const RestartLimits used = watch_limits(cfg, limits, s->role);
    const Decision d = decide(watched, history(*s), phase(), used);
    if (d.action != Decision::Action::kill_hung) continue;
    s->hung = name_the_limit(d.reason, cfg, used, limits);
    if (!watched.reported_running && !s->group.builtin)  // the usual cause with a user's program
      s->hung += fmt::format(
          "; a program with heartbeat = true must join with `with tandem.job() as job:` (Python) soon after it "
          "starts, or set heartbeat = false in {}",
          group_table(s->group));
    console.warning(fmt::format("{} (pid {}) {}: killing it", s->name, s->last_pid, s->hung));
    s->child.signal(SIGKILL);
  }
}

}  // namespace tandem::run
