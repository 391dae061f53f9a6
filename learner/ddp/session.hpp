// Session: what a data-parallel rank sets up once before training: the rendezvous store (rendezvous.hpp)
// and the communicator (comm.hpp: shared memory or Gloo for CPU training, NCCL for CUDA). Made only
// when WORLD_SIZE > 1: a single rank needs neither store nor process group.
//
// Threads: main's thread. Destroy it after everything that uses its communicator (GradSync).
#pragma once

#include <c10/util/intrusive_ptr.h>

#include <memory>
#include <string_view>
#include <vector>

#include "common/settings/job.hpp"
#include "learner/ddp/comm.hpp"
#include "learner/ddp/grad_sync.hpp"
#include "learner/ddp/rank_env.hpp"

namespace tandem::ddp {

// ddp.cpu_affinity = "auto": where the node's ranks x `threads` equal the CPUs the learner may run
// on (`allowed`, in order), rank `local_rank` keeps to its own `threads` of them, so each rank's
// training and feed threads share its cores and no rank's work lands on another's core mid-step: a
// synchronous step waits for the slowest rank, and that made it steadier (docs/DATA_PARALLEL.md).
// Empty where it does not pin (fewer ranks than CPUs, or more).
std::vector<int> cpus_for_rank(int local_rank, int local_world_size, int threads, const std::vector<int>& allowed);

class Session {
 public:
  // `cuda_device` >= 0: NCCL on that GPU. Else CPU tensors: every rank on this node and
  // ddp.cpu_collectives = "shm": the node's shared-memory group (named after `job`); otherwise Gloo.
  // Uses [ddp] and learner.threads. UserError naming the missing ranks when the rendezvous fails.
  static std::unique_ptr<Session> start(const RankInfo& rank, const JobSettings& settings, std::string_view job,
                                        int cuda_device);
  ~Session();

  const RankInfo& rank() const { return rank_; }
  Communicator& comm() { return *comm_; }
  // The gradient-sync options from the config (bucket sizes, the collective timeout).
  const GradSyncOptions& sync_options() const { return sync_options_; }

 private:
  Session() = default;
  RankInfo rank_;
  GradSyncOptions sync_options_;
  c10::intrusive_ptr<c10d::Store> store_;  // rank 0 serves it: it outlives the communicator
  std::unique_ptr<Communicator> comm_;
};

}  // namespace tandem::ddp
