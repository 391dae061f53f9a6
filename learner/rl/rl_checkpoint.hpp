// The RL learner's checkpoints, in the supervised trainer's format (learner/trainer.hpp and
// docs/FORMAT.md "Checkpoint files": model.<name>, optim.<name>.<state>, __metadata__ with format,
// step, optimizer, optimizer_steps, model) so one reader and one resume path serve both. The RL
// learner adds version, env_steps and algo, and its own state as rl.<name> tensors (the reward
// scaler's, with rl.norm_reward); nothing it stores depends on the wall clock or the job id, so two
// deterministic runs write byte-identical files. The model's buffers (rl.norm_obs's observation
// statistics among them) are saved and restored with its parameters.
//
// Threads: the learner's main thread.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "common/torch/models.hpp"
#include "learner/optim.hpp"

namespace tandem::rl {

// learner_state: tensors of the learner's own (saved as rl.<name>, restored into the same tensors).
void save_checkpoint(const std::string& path, const Model& model, const Optimizer& optimizer, std::int64_t step,
                     const std::map<std::string, std::string>& extra, const NamedTensors& learner_state = {});

struct Restored {
  std::int64_t step = 0;
  std::map<std::string, std::string> metadata;
};
// Checks every tensor's name, shape and dtype before copying any, so a file of another model or
// optimizer is a UserError naming the file and leaves the model as it was.
Restored load_checkpoint(const std::string& path, Model& model, Optimizer& optimizer,
                         const NamedTensors& learner_state = {});

// A metadata count ("version", "env_steps"), or `otherwise` when the key is absent; text that is not
// a count is a UserError naming the file.
std::uint64_t metadata_count(const std::string& path, const std::map<std::string, std::string>& meta,
                             const std::string& key, std::uint64_t otherwise);

}  // namespace tandem::rl
