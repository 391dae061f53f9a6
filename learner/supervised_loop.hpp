// The supervised training loop of tandem-learner: a model from the dataset cache's samples, trained by
// Trainer (trainer.hpp), published into the node's weight slab, checkpointed into the run directory.
//
// Data-parallel ranks (rank.world_size > 1, learner/ddp): every rank trains on its disjoint shard of
// the split (EpochSampler's rank shard, the same steps per epoch on every rank) with gradients averaged
// by GradSync; every rank resumes from global rank 0's checkpoint step, then takes rank 0's weights
// and optimizer state; only rank 0 writes checkpoints; each node's local rank 0 publishes into that
// node's slab; a stop request on any rank stops every rank after the same step.
//
// Checkpoints go to the run directory every checkpoint.every_steps, at a stop request and at
// the end; a start resumes from the newest one. Returns 0 when the step budget was reached, or a stop
// was requested and the checkpoint written; failures are exceptions (common/error.hpp).
// Threads: main's thread.
#pragma once

#include "common/settings/job.hpp"

namespace tandem {
namespace shm {
class JobProcess;
}
namespace ddp {
struct RankInfo;
}

int run_supervised_learner(const JobSettings& settings, shm::JobProcess& process, const ddp::RankInfo& rank);

}  // namespace tandem
