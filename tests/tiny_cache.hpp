// A tiny learnable dataset cache for tests that run the real programs: 2304 samples of 1x8x8 uint8
// (2048 train, 256 test) whose label (0..7) is the row holding a bright band, so an mlp learns it in
// a few hundred steps.
#pragma once

#include <cstdint>
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "shm/dataset_cache.hpp"
#include "tests/harness.hpp"
#include "shm/segment.hpp"
#include "tests/harness.hpp"

namespace tandem::test {

// Writes the cache as /tandem.data.<name>; it stays after this process exits.
inline void write_tiny_cache(const std::string& name) {
  const std::uint64_t n = 2304;
  shm::DatasetSpec spec{.name = name,
                        .source = "generated",
                        .format = "test",
                        .num_samples = n,
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

// The settings most tiny jobs use: small batches, frequent publishes, no checkpoints on the way. A
// job adds its own lines (supervised.steps, learner.device, ...) after them; a later line of the same
// key wins.
inline constexpr const char* kTinyKeys =
    "supervised.batch_size = 32\nschedule.warmup_steps = 10\nlearner.threads = 1\npublish.every_steps = 20\n"
    "checkpoint.every_steps = 0\nlearner.report_every_steps = 10\nactor.min_interval_s = 0.2\nactor.batch_size = 256\n";

// A `tandem run` config over the tiny cache named `dataset`: the real tandem-learner and tandem-actor
// (required_env), the 8-class mlp with the cache's normalisation, plain status. run_keys are the
// rest of [run], one key per line (actors, run_dir, ...); keys are the programs' settings, one
// `table.key = value` per line, written into their tables after [run] and [data].
struct TinyJob {
  std::string job;
  std::string dataset;
  std::string run_keys;
  std::string keys;
};
inline std::string tiny_job_config(const TinyJob& j) {
  std::vector<std::pair<std::string, std::vector<std::pair<std::string, std::string>>>> tables = {
      {"data", {{"name", fmt::format("\"{}\"", j.dataset)}, {"mean", "\"0.5\""}, {"std", "\"0.3\""}}},
      {"model", {{"name", "\"mlp\""}, {"num_classes", "8"}}}};
  std::istringstream lines(j.keys);
  for (std::string line; std::getline(lines, line);) {
    const auto dot = line.find('.'), eq = line.find(" = ");
    if (line.empty()) continue;
    if (dot == std::string::npos || eq == std::string::npos || dot > eq)
      throw std::invalid_argument("TinyJob::keys: '" + line + "' is not `table.key = value`");
    const std::string table = line.substr(0, dot), key = line.substr(dot + 1, eq - dot - 1),
                      value = line.substr(eq + 3);
    auto t = std::find_if(tables.begin(), tables.end(), [&](const auto& e) { return e.first == table; });
    if (t == tables.end()) t = tables.insert(tables.end(), {table, {}});
    auto k = std::find_if(t->second.begin(), t->second.end(), [&](const auto& e) { return e.first == key; });
    if (k == t->second.end()) t->second.emplace_back(key, value);
    else k->second = value;
  }
  std::string text = fmt::format(R"([run]
job = "{}"
unique_id = false
learner_program = "{}"
actor_program = "{}"
status = "plain"
{}
)",
                                 j.job, required_env("TANDEM_LEARNER"), required_env("TANDEM_ACTOR"), j.run_keys);
  for (const auto& [table, entries] : tables) {
    text += fmt::format("[{}]\n", table);
    for (const auto& [key, value] : entries) text += fmt::format("{} = {}\n", key, value);
  }
  return text;
}

}  // namespace tandem::test
