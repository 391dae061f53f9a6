// [data] (the dataset cache a supervised job trains and evaluates on, and its normalisation) and
// [model] (the network learner and actors build). Each struct is its table, typed; parse() refuses
// what the table alone can refuse, as one UserError line naming the key and the fix.
// Torch-free: the launcher parses the same structs before it starts anything.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/config.hpp"

namespace tandem {

struct DataSettings {
  std::string name = "fmnist";
  std::vector<double> mean{0.2860};  // one value, or one per channel
  std::vector<double> std{0.3530};   // as many as mean, every one positive
  std::string train_split = "train";
  std::string test_split = "test";

  static DataSettings parse(const Config& config);
  static std::span<const ConfigKey> keys();
};

// The built-in model.name values; any other name must be a TorchScript file. The one list:
// common/torch/models.cpp builds exactly these, and the launcher checks names against it torch-free.
inline constexpr std::array<std::string_view, 5> kBuiltinModels = {"mlp", "cnn", "resnet18", "actor_critic_mlp",
                                                                   "actor_critic_cnn"};

struct ModelSettings {
  std::string name = "cnn";  // a built-in, or an existing TorchScript (zip) file
  std::int64_t num_classes = 10;
  std::uint64_t seed = 0;
  std::string package{};      // an AOTInductor package for the evaluators' forward ("": none)
  std::int64_t hidden = 64;   // actor_critic_mlp's layers
  bool shared_trunk = false;  // actor_critic_mlp: one trunk for both heads

  bool builtin() const;
  static ModelSettings parse(const Config& config);
  static std::span<const ConfigKey> keys();
};

// "0.4914, 0.4822,0.4465" -> {0.4914, 0.4822, 0.4465}; UserError naming `key` on anything else,
// NaN and infinities included.
std::vector<double> parse_number_list(const std::string& key, const std::string& text);

}  // namespace tandem
