#include "common/settings/data.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/error.hpp"

namespace tandem {
namespace {

using T = ConfigType;

// clang-format off
const std::vector<ConfigKey> kData = {
    {"data.name", T::string, "\"fmnist\"", "dataset cache /tandem.data.<name> to train and evaluate on; preload it first (`tandem data preload <name> --from <dir>`; tools/demo does it)"},
    {"data.from", T::string, "\"/usr/share/datasets/fashion-mnist\"", "where tools/demo preloads data.name from when the cache is missing (IDX, CIFAR-10 batches or .npy); the programs only read the cache"},
    {"data.mean", T::string, "\"0.2860\"", "input normalisation (x/255 - mean) / std: one value, or one per channel separated by commas"},
    {"data.std", T::string, "\"0.3530\"", "input normalisation divisor: one value, or one per channel separated by commas"},
    {"data.train_split", T::string, "\"train\"", "split the learner trains on"},
    {"data.test_split", T::string, "\"test\"", "split the evaluators evaluate on"},
};
// clang-format on

// clang-format off
const std::vector<ConfigKey> kModel = {
    {"model.name", T::string, "\"cnn\"", "mlp, cnn, resnet18 (32x32), actor_critic_mlp, or a TorchScript file path; input shape comes from the cache"},
    {"model.num_classes", T::integer, "10", "output classes (labels must be 0..num_classes-1)", 1, 1000000},
    {"model.seed", T::integer, "0", "seed of the initial weights (learner and actors build the same model)", 0, 9.0e15},
    {"model.hidden", T::integer, "64", "actor_critic_mlp: units in each of its two tanh layers (CleanRL's and Sample Factory's MuJoCo networks: 64)", 1, 65536},
    {"model.shared_trunk", T::boolean, "false", "actor_critic_mlp: one trunk under the policy and value heads (Sample Factory's default) instead of one each (CleanRL's)"},
    {"model.package", T::string, "\"\"", "supervised evaluators on cuda: an AOTInductor package (.pt2, tools/export_aoti.py) that runs the evaluation forward; model.name still names the architecture the learner trains, whose weights the package takes in at every version (docs/CUDA_GRAPHS.md)"},
};
// clang-format on

// The launcher does not link LibTorch: a TorchScript file is recognised as the zip archive it is.
void check_model_file(const std::string& name) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(name, ec))
    fail(
        "config: model.name = \"{}\" is neither a built-in ({}) nor an existing TorchScript file: check the name "
        "or the path",
        name, fmt::join(kBuiltinModels, ", "));
  std::array<char, 4> magic{};
  std::ifstream in(name, std::ios::binary);
  in.read(magic.data(), magic.size());
  if (!in || std::memcmp(magic.data(), "PK\x03\x04", 4) != 0)
    fail("config: model.name = \"{}\" is not a TorchScript file (not a zip archive): save it with torch.jit.save",
         name);
}

}  // namespace

DataSettings DataSettings::parse(const Config& c) {
  DataSettings s{.name = c.string("data.name"),
                 .mean = parse_number_list("data.mean", c.string("data.mean")),
                 .std = parse_number_list("data.std", c.string("data.std")),
                 .train_split = c.string("data.train_split"),
                 .test_split = c.string("data.test_split")};
  if (s.mean.size() != s.std.size())
    fail("config: data.mean has {} values and data.std {}: give both one value, or one per channel", s.mean.size(),
         s.std.size());
  for (double v : s.std)
    if (!(v > 0)) fail("config: data.std = \"{}\" holds {}: every entry must be positive", c.string("data.std"), v);
  return s;
}

std::span<const ConfigKey> DataSettings::keys() { return kData; }

bool ModelSettings::builtin() const {
  return std::find(kBuiltinModels.begin(), kBuiltinModels.end(), name) != kBuiltinModels.end();
}

ModelSettings ModelSettings::parse(const Config& c) {
  ModelSettings s{.name = c.string("model.name"),
                  .num_classes = c.integer("model.num_classes"),
                  .seed = static_cast<std::uint64_t>(c.integer("model.seed")),
                  .package = c.string("model.package"),
                  .hidden = c.integer("model.hidden"),
                  .shared_trunk = c.boolean("model.shared_trunk")};
  if (!s.builtin()) check_model_file(s.name);
  if ((s.hidden != 64 || s.shared_trunk) && s.name != "actor_critic_mlp")
    fail("config: model.hidden and model.shared_trunk shape actor_critic_mlp, not model.name = \"{}\": leave them out",
         s.name);
  std::error_code ec;
  if (!s.package.empty() && !std::filesystem::is_regular_file(s.package, ec))
    fail(
        "config: model.package = \"{}\" does not exist: make it with tools/export_aoti.py, or leave model.package empty",
        s.package);
  return s;
}

std::span<const ConfigKey> ModelSettings::keys() { return kModel; }

std::vector<double> parse_number_list(const std::string& key, const std::string& text) {
  std::vector<double> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    const char* begin = item.c_str();
    char* end = nullptr;
    const double v = std::strtod(begin, &end);
    while (end && (*end == ' ' || *end == '\t')) ++end;
    if (end == begin || *end != '\0')
      fail("config: {} = \"{}\" is not a list of numbers: write e.g. \"0.5\" or \"0.49,0.48,0.45\"", key, text);
    if (!std::isfinite(v))
      fail("config: {} = \"{}\" holds {}: write finite numbers, e.g. \"0.5\" or \"0.49,0.48,0.45\"", key, text, v);
    out.push_back(v);
  }
  if (out.empty()) fail("config: {} is empty: write e.g. \"0.5\" or \"0.49,0.48,0.45\"", key);
  return out;
}

}  // namespace tandem
