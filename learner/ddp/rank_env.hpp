// Who this learner rank is, read from the environment only, so that `tandem run`, torchrun and Slurm
// can all start tandem-learner unchanged.
//
// Sources, first match wins:
//   torchrun (and `tandem run`): RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT
//   Slurm (RANK unset):          SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NTASKS_PER_NODE
//                                (its leading count; "4(x2)" is 4), MASTER_ADDR, else
//                                SLURM_LAUNCH_NODE_IPADDR; MASTER_PORT, else 29500 (torchrun's default)
//   neither:                     one rank (world 1), which needs no store and no process group
// A malformed or inconsistent value is a UserError naming the variable and the fix.
//
// Threads: pure functions of their input; call from main's thread (getenv is not thread-safe
// against setenv).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace tandem::ddp {

struct RankInfo {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  std::uint16_t master_port = 29500;
  std::string source = "single";  // "torchrun", "slurm" or "single": says where the numbers came from

  bool distributed() const { return world_size > 1; }
  bool local_leader() const { return local_rank == 0; }  // publishes into this node's slab
  std::string name() const;                              // "rank 1 of 2 (local 1 of 2)"
};

using EnvLookup = std::function<const char*(const char*)>;

// From the process environment (::getenv), or from `lookup` (tests).
RankInfo rank_from_env();
RankInfo rank_from_env(const EnvLookup& lookup);

}  // namespace tandem::ddp
