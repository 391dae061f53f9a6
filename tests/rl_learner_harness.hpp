// The RL learner (learner/rl) against an in-test producer, for the CPU and the GPU tests: children of
// the test binary run the learner ranks under a control block as `tandem run` would, while the test
// writes random CartPole steps into their rings through ExperienceWriter, as rollout actors would
// (uniformly random actions, every slot tagged with version 1, independent of what is published).
//
//   const LearnerRun run = run_learner(dir, write_config(dir, "ppo"), /*actors=*/2, /*corrupt_first=*/true);
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "shm/control_block.hpp"
#include "tests/harness.hpp"

namespace tandem::test {

// A job config for `algo` with small budgets: 4 CartPoles, 16-step slots, 2 slots a ring and an
// update, 1024 env steps. `update`: how an update learns from its batch ([rl] keys); `extra`: more
// tables after [actor]; `device`: learner.device.
std::string write_config(const TempDir& dir, const std::string& algo, const std::string& extra = "",
                         const std::string& update = "update_epochs = 2\nminibatches = 2\n",
                         const std::string& device = "cpu");

struct LearnerRun {
  int status = -1;
  std::optional<shm::ProcessMetrics> metrics;  // rank 0's last report
  std::uint64_t refused = 0;
  std::string checkpoint;
};

// Runs `ranks` learner children in a fresh job with `actors` rollout rings, feeding every ring until
// every learner has exited (the status: the first non-zero one); the first slot of ring 0 is corrupt
// when `corrupt_first`.
LearnerRun run_learner(const TempDir& dir, const std::string& config, std::uint32_t actors, bool corrupt_first,
                       bool deterministic = false, int ranks = 1);

// The largest difference between the checkpoint's model and the untrained one of the same seed.
double distance_from_initial(const std::string& checkpoint, const std::string& config_path);
// The largest difference between two checkpoints' models, relative to the largest weight.
double model_difference(const std::string& a, const std::string& b);
std::string file_bytes(const std::string& path);

// PPO and V-trace: 2 learner ranks on `device`, each on its own actor's ring, end within `tolerance`
// of one rank's weights over both rings' slots.
void check_ranks_learn_as_one_rank(const std::string& device, double tolerance);

}  // namespace tandem::test
