#include "learner/ddp/session.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sched.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <string>
#include <vector>

#include "common/log.hpp"
#include "learner/ddp/rendezvous.hpp"

namespace tandem::ddp {
namespace {

std::chrono::milliseconds millis(double seconds) {
  return std::chrono::milliseconds(static_cast<std::int64_t>(seconds * 1000.0));
}

// The CPUs this process may run on, in order (none where the kernel will not say).
std::vector<int> allowed_cpus() {
  cpu_set_t allowed;
  std::vector<int> cpus;
  if (::sched_getaffinity(0, sizeof allowed, &allowed) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &allowed)) cpus.push_back(c);
  return cpus;
}

// ddp.shm_progress: whether the training thread runs the node's shared-memory collectives itself
// (comm.hpp, make_node_shm): "auto" when the node's ranks' intra-op threads leave no CPU to a worker.
bool caller_runs_shm_ops(const RankInfo& rank, const DdpSettings& ddp, int threads) {
  if (ddp.shm_progress != DdpSettings::Progress::automatic) return ddp.shm_progress == DdpSettings::Progress::caller;
  const auto cpus = static_cast<std::int64_t>(allowed_cpus().size());
  return std::int64_t{rank.local_world_size} * threads >= cpus;
}

// ddp.cpu_affinity: keeps this rank (the calling thread, and every thread it starts later) to its own
// CPUs; returns them, or none where it does not pin.
std::vector<int> pin_rank(const RankInfo& rank, const DdpSettings& ddp, int threads) {
  if (!ddp.pin_cpus) return {};
  std::vector<int> cpus = cpus_for_rank(rank.local_rank, rank.local_world_size, threads, allowed_cpus());
  if (cpus.empty()) return cpus;
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cpus) CPU_SET(c, &set);
  if (::sched_setaffinity(0, sizeof set, &set) != 0) return {};  // a container that forbids it: run unpinned
  return cpus;
}

}  // namespace

std::vector<int> cpus_for_rank(int local_rank, int local_world_size, int threads, const std::vector<int>& allowed) {
  if (local_world_size < 2 || threads < 1 || static_cast<std::size_t>(local_world_size) * threads != allowed.size())
    return {};
  return std::vector<int>(allowed.begin() + local_rank * threads, allowed.begin() + (local_rank + 1) * threads);
}

std::unique_ptr<Session> Session::start(const RankInfo& rank, const JobSettings& settings, std::string_view job,
                                        int cuda_device) {
  const DdpSettings& ddp = settings.ddp;
  const int threads = settings.learner.threads;
  std::unique_ptr<Session> s(new Session());
  s->rank_ = rank;
  s->sync_options_.bucket_first_mb = ddp.bucket_first_mb;
  s->sync_options_.bucket_mb = ddp.bucket_mb;
  s->sync_options_.timeout = millis(ddp.collective_timeout_s);
  const auto rendezvous_timeout = millis(ddp.rendezvous_timeout_s);
  s->store_ = rendezvous(rank, rendezvous_timeout);
  const bool one_node = rank.local_world_size == rank.world_size;
  if (cuda_device >= 0) s->comm_ = make_nccl(s->store_, rank, cuda_device, s->sync_options_.timeout);
  else if (one_node && ddp.cpu_collectives == DdpSettings::CpuCollectives::shm)
    s->comm_ = make_node_shm(s->store_, rank, job, rendezvous_timeout, s->sync_options_.timeout,
                             caller_runs_shm_ops(rank, ddp, threads));
  else s->comm_ = make_gloo(s->store_, rank, s->sync_options_.timeout);
  const std::vector<int> pinned = cuda_device < 0 ? pin_rank(rank, ddp, threads) : std::vector<int>{};
  log::info("{} ({}): {} ranks met at {}:{}; collectives over {}{}", rank.name(), rank.source, rank.world_size,
            rank.master_addr, rank.master_port, s->comm_->backend(),
            pinned.empty() ? std::string() : fmt::format("; kept to CPU {}", fmt::join(pinned, ",")));
  return s;
}

Session::~Session() = default;

}  // namespace tandem::ddp
