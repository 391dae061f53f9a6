// What tandem-learner and tandem-actor set up the same way from a job config (common/job_keys.hpp):
// the config itself, and the model spec that follows from [model] and the dataset cache's sample
// shape. Learner and actors must build the same network, or the follower's signature check fails.
// Header-only (both programs already link shm and LibTorch); used by their mains only.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdlib>
#include <span>
#include <string>
#include <vector>

#include "common/config.hpp"
#include "common/error.hpp"
#include "common/job_keys.hpp"
#include "common/torch/models.hpp"
#include "shm/dataset_cache.hpp"

namespace tandem {

// The command line both programs take: `PROGRAM [config.toml] [--set key=value ...]`.
struct ProgramArgs {
  std::string file;
  std::vector<std::string> overrides;
};
inline void add_program_args(CLI::App& app, ProgramArgs& args) {
  app.add_option("config", args.file, "job config (TOML); default: $TANDEM_CONFIG, else the built-in defaults");
  app.add_option("--set", args.overrides, "override one key, e.g. --set learner.steps=100")->type_name("KEY=VALUE");
}

// The config file: the command line's config argument, else $TANDEM_CONFIG (set by `tandem run`), else
// the defaults. `overrides` are "key=value" strings (--set).
inline Config load_program_config(const std::string& file, std::span<const std::string> overrides) {
  std::string path = file;
  if (path.empty())
    if (const char* env = std::getenv("TANDEM_CONFIG")) path = env;
  const auto schema = program_schema();
  return path.empty() ? Config::parse("", "<default>", overrides, schema) : Config::load(path, overrides, schema);
}

// [model] + the cache's field "x" (C,H,W; or H,W = one channel).
inline ModelSpec model_spec_for(const Config& config, const shm::DatasetCache& cache) {
  const auto x = cache.field("x");
  ModelSpec spec{.name = config.string("model.name"),
                 .num_classes = config.integer("model.num_classes"),
                 .seed = static_cast<std::uint64_t>(config.integer("model.seed"))};
  if (x.sample_shape.size() == 3) {
    spec.channels = static_cast<std::int64_t>(x.sample_shape[0]);
    spec.height = static_cast<std::int64_t>(x.sample_shape[1]);
    spec.width = static_cast<std::int64_t>(x.sample_shape[2]);
  } else if (x.sample_shape.size() == 2) {
    spec.channels = 1;
    spec.height = static_cast<std::int64_t>(x.sample_shape[0]);
    spec.width = static_cast<std::int64_t>(x.sample_shape[1]);
  } else {
    fail("dataset cache field \"x\" has {} dimensions per sample: models need C,H,W images (re-preload the data)",
         x.sample_shape.size());
  }
  return spec;
}

}  // namespace tandem
