#include "learner/ddp/session.hpp"

#include <sched.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "common/config.hpp"
#include "common/log.hpp"
#include "learner/ddp/rendezvous.hpp"

namespace tandem::ddp {
namespace {

std::chrono::milliseconds millis(double seconds) {
  return std::chrono::milliseconds(static_cast<std::int64_t>(seconds * 1000.0));
}

// learner.shm_progress: whether the training thread runs the node's shared-memory collectives itself
// (comm.hpp, make_node_shm): "auto" when the node's ranks' intra-op threads leave no CPU to a worker.
bool caller_runs_shm_ops(const RankInfo& rank, const Config& config) {
  const std::string mode = config.string("learner.shm_progress");
  if (mode != "auto") return mode == "caller";
  cpu_set_t allowed;
  const int cpus = ::sched_getaffinity(0, sizeof allowed, &allowed) == 0 ? CPU_COUNT(&allowed) : 1;
  return rank.local_world_size * config.integer("learner.threads") >= cpus;
}

}  // namespace

std::unique_ptr<Session> Session::start(const RankInfo& rank, const Config& config, std::string_view job,
                                        int cuda_device) {
  std::unique_ptr<Session> s(new Session());
  s->rank_ = rank;
  s->sync_options_.bucket_first_mb = config.real("learner.bucket_first_mb");
  s->sync_options_.bucket_mb = config.real("learner.bucket_mb");
  s->sync_options_.timeout = millis(config.real("learner.collective_timeout_s"));
  const auto rendezvous_timeout = millis(config.real("learner.rendezvous_timeout_s"));
  s->store_ = rendezvous(rank, rendezvous_timeout);
  const bool one_node = rank.local_world_size == rank.world_size;
  if (cuda_device >= 0)
    s->comm_ = make_nccl(s->store_, rank, cuda_device, s->sync_options_.timeout);
  else if (one_node && config.string("learner.cpu_collectives") == "shm")
    s->comm_ = make_node_shm(s->store_, rank, job, rendezvous_timeout, s->sync_options_.timeout,
                             caller_runs_shm_ops(rank, config));
  else
    s->comm_ = make_gloo(s->store_, rank, s->sync_options_.timeout);
  log::info("{} ({}): {} ranks met at {}:{}; collectives over {}", rank.name(), rank.source, rank.world_size,
            rank.master_addr, rank.master_port, s->comm_->backend());
  return s;
}

Session::~Session() = default;

}  // namespace tandem::ddp
