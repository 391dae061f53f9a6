#include "learner/ddp/session.hpp"

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "common/config.hpp"
#include "common/log.hpp"
#include "learner/ddp/rendezvous.hpp"

namespace tandem::ddp {
namespace {

std::chrono::milliseconds millis(double seconds) {
  return std::chrono::milliseconds(static_cast<std::int64_t>(seconds * 1000.0));
}

}  // namespace

std::unique_ptr<Session> Session::start(const RankInfo& rank, const Config& config, int cuda_device) {
  std::unique_ptr<Session> s(new Session());
  s->rank_ = rank;
  s->sync_options_.bucket_first_mb = config.real("learner.bucket_first_mb");
  s->sync_options_.bucket_mb = config.real("learner.bucket_mb");
  s->sync_options_.timeout = millis(config.real("learner.collective_timeout_s"));
  s->store_ = rendezvous(rank, millis(config.real("learner.rendezvous_timeout_s")));
  s->comm_ = cuda_device >= 0 ? make_nccl(s->store_, rank, cuda_device, s->sync_options_.timeout)
                              : make_gloo(s->store_, rank, s->sync_options_.timeout);
  log::info("{} ({}): {} ranks met at {}:{}", rank.name(), rank.source, rank.world_size, rank.master_addr,
            rank.master_port);
  return s;
}

Session::~Session() = default;

}  // namespace tandem::ddp
