// The config keys of the programs `tandem run` starts: [data], [model], [learner] and [actor].
// Torch-free, so that the launcher validates a whole job config before it starts anything, and the
// children (tandem-learner, tandem-actor) read their job.toml ($TANDEM_CONFIG) with the same schema.
// Every key is documented here; `tandem run --explain` prints them, examples/*.toml use them.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "common/config.hpp"

namespace tandem {

std::span<const ConfigKey> data_keys();     // data.*: which dataset cache, and its normalisation
std::span<const ConfigKey> model_keys();    // model.*: the network learner and actors build
std::span<const ConfigKey> learner_keys();  // learner.*
std::span<const ConfigKey> actor_keys();    // actor.*
// data + model + learner + actor: what a child's job.toml may hold.
std::vector<ConfigKey> program_schema();

// "0.4914, 0.4822,0.4465" -> {0.4914, 0.4822, 0.4465}; UserError naming `key` on anything else.
std::vector<double> parse_number_list(const std::string& key, const std::string& text);

}  // namespace tandem
