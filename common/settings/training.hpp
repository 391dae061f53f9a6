// What the learner optimises with: [supervised] (a supervised run's batches and length), [optimizer]
// (every learner's) and [schedule] (the supervised learning-rate schedule; RL anneals by rl.anneal_lr).
// Each struct is its table, typed; parse() refuses what the table alone can refuse, as one UserError
// line naming the key and the fix. Torch-free: the launcher parses the same structs.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "common/config.hpp"

namespace tandem {

struct SupervisedSettings {
  enum class Feed { host, device };
  std::uint64_t batch_size = 128;  // one step's samples across all ranks
  double epochs = 4;
  std::int64_t steps = 0;  // 0: epochs decide
  Feed feed = Feed::host;
  unsigned feed_workers = 1;  // 0: min(8, cores)

  static SupervisedSettings parse(const Config& config);
  static std::span<const ConfigKey> keys();
};

struct OptimizerSettings {
  std::string name = "sgd";  // sgd | adam | adamw
  double lr = 0.05;
  double momentum = 0.9;  // sgd
  bool nesterov = true;   // sgd
  double weight_decay = 5e-4;

  static OptimizerSettings parse(const Config& config);
  static std::span<const ConfigKey> keys();
};

struct ScheduleSettings {
  std::string name = "cosine";  // constant | step | cosine
  std::int64_t warmup_steps = 100;
  double min_lr = 0;                      // cosine
  std::int64_t decay_every_steps = 1000;  // step
  double decay_factor = 0.1;              // step

  static ScheduleSettings parse(const Config& config);
  static std::span<const ConfigKey> keys();
};

}  // namespace tandem
