// A tiny learnable dataset cache for tests that run the real programs: 2304 samples of 1x8x8 uint8
// (2048 train, 256 test) whose label (0..7) is the row holding a bright band, so an mlp learns it in
// a few hundred steps.
#pragma once

#include <cstdint>
#include <fmt/format.h>

#include <cstdlib>
#include <stdexcept>
#include <string>

#include "shm/dataset_cache.hpp"
#include "shm/segment.hpp"
#include "tests/harness.hpp"

namespace tandem::test {

// Writes the cache as /tandem.data.<name>; it stays after this process exits.
inline void write_tiny_cache(const std::string& name) {
  const std::uint64_t n = 2304;
  shm::DatasetSpec spec{.name = name, .source = "generated", .format = "test", .num_samples = n,
                        .fields = {{"x", shm::DType::u8, {1, 8, 8}}, {"y", shm::DType::i64, {}}},
                        .splits = {{"train", 0, 2048}, {"test", 2048, n}}};
  auto w = shm::DatasetWriter::create(spec, false);
  auto* x = reinterpret_cast<std::uint8_t*>(w.field_data(0));
  auto* y = reinterpret_cast<std::int64_t*>(w.field_data(1));
  for (std::uint64_t i = 0; i < n; ++i) {
    const auto label = static_cast<std::int64_t>((i * 7) % 8);
    for (int p = 0; p < 64; ++p)
      x[i * 64 + p] = static_cast<std::uint8_t>(((i * 31 + p * 17) % 40) + (p / 8 == label ? 200 : 0));
    y[i] = label;
  }
  w.commit(0, 1);
}

// The cache under a unique name, removed when the test is done with it.
struct TinyCache {
  std::string name;
  explicit TinyCache(const std::string& prefix = "tiny") : name(unique_name(prefix)) { write_tiny_cache(name); }
  TinyCache(const TinyCache&) = delete;
  TinyCache& operator=(const TinyCache&) = delete;
  ~TinyCache() { shm::Segment::unlink(shm::dataset_segment_name(name)); }
};

// The real programs' paths, from the environment tests/meson.build gives the tests that run them.
inline std::string program_from_env(const char* variable) {
  const char* path = std::getenv(variable);
  if (path == nullptr) throw std::runtime_error(std::string(variable) + " is not set (tests/meson.build sets it)");
  return path;
}

// The learner and actor settings most tiny jobs use: small batches, frequent publishes, no checkpoints
// on the way. A job adds its own lines (steps, device, ...) after them.
inline constexpr const char* kTinyLearnerKeys =
    "batch_size = 32\nwarmup_steps = 10\nthreads = 1\npublish_every_steps = 20\ncheckpoint_every_steps = 0\n"
    "report_every_steps = 10\n";
inline constexpr const char* kTinyActorKeys = "min_interval_s = 0.2\nbatch_size = 256\n";

// A `tandem run` config over the tiny cache named `dataset`: the real tandem-learner and tandem-actor
// (program_from_env), the 8-class mlp with the cache's normalisation, plain status. The *_keys are the
// rest of each table, one key per line (actors, run_dir, steps, ...).
struct TinyJob {
  std::string job;
  std::string dataset;
  std::string run_keys;
  std::string learner_keys;
  std::string actor_keys;
};
inline std::string tiny_job_config(const TinyJob& j) {
  return fmt::format(R"([run]
job = "{}"
unique_id = false
learner_program = "{}"
actor_program = "{}"
status = "plain"
{}
[data]
name = "{}"
mean = "0.5"
std = "0.3"
[model]
name = "mlp"
num_classes = 8
[learner]
{}
[actor]
{}
)",
                     j.job, program_from_env("TANDEM_LEARNER"), program_from_env("TANDEM_ACTOR"), j.run_keys,
                     j.dataset, j.learner_keys, j.actor_keys);
}

}  // namespace tandem::test
