// A tiny learnable dataset cache for tests that run the real programs: 2304 samples of 1x8x8 uint8
// (2048 train, 256 test) whose label (0..7) is the row holding a bright band, so an mlp learns it in
// a few hundred steps.
#pragma once

#include <cstdint>
#include <fmt/format.h>

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

// A `tandem run` config over `cache`: job `job`, one learner training the 8-class mlp with the cache's
// normalisation and one actor, run by the given programs; `learner_keys` and `actor_keys` are more
// lines for those two tables (batch, steps, device, ...).
inline std::string tiny_job_config(const TinyCache& cache, const std::string& job, const std::string& run_dir,
                                   const std::string& learner_program, const std::string& actor_program,
                                   const std::string& learner_keys, const std::string& actor_keys) {
  return fmt::format(R"([run]
job = "{}"
unique_id = false
actors = 1
run_dir = "{}"
learner_program = "{}"
actor_program = "{}"
status = "plain"
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
                     job, run_dir, learner_program, actor_program, cache.name, learner_keys, actor_keys);
}

}  // namespace tandem::test
