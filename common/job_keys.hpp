// The config keys of the programs `tandem run` starts: [data], [model], [learner], [actor], and for
// reinforcement learning [env] and [rl].
// Torch-free, so that the launcher validates a whole job config before it starts anything, and the
// children (tandem-learner, tandem-actor) read their job.toml ($TANDEM_CONFIG) with the same schema.
// Every key is documented here; `tandem run --explain` prints them, examples/*.toml use them.
#pragma once

#include <array>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/config.hpp"

namespace tandem {

std::span<const ConfigKey> data_keys();     // data.*: which dataset cache, and its normalisation
std::span<const ConfigKey> model_keys();    // model.*: the network learner and actors build
std::span<const ConfigKey> learner_keys();  // learner.*
std::span<const ConfigKey> actor_keys();    // actor.*
std::span<const ConfigKey> env_keys();      // env.*: the environments rollout actors and RL evaluators step
std::span<const ConfigKey> rl_keys();       // rl.*: rollouts, rings and the PPO / V-trace update
// The built-in model.name values; any other name must be a TorchScript file. The one list:
// common/torch/models.cpp builds exactly these, and the launcher checks names against it torch-free.
inline constexpr std::array<std::string_view, 4> kBuiltinModels = {"mlp", "cnn", "resnet18", "actor_critic_mlp"};

// data + model + learner + actor + env + rl: what a child's job.toml may hold.
std::vector<ConfigKey> program_schema();

// "0.4914, 0.4822,0.4465" -> {0.4914, 0.4822, 0.4465}; UserError naming `key` on anything else,
// NaN and infinities included.
std::vector<double> parse_number_list(const std::string& key, const std::string& text);

}  // namespace tandem
