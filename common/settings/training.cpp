#include "common/settings/training.hpp"

#include <vector>

#include "common/error.hpp"

namespace tandem {
namespace {

using T = ConfigType;

// clang-format off
const std::vector<ConfigKey> kSupervised = {
    {"supervised.batch_size", T::integer, "128", "samples per optimizer step, across all learner ranks: each of N data-parallel ranks takes batch_size / N (so run.learners changes the speed, not the training)", 1, 1048576},
    {"supervised.epochs", T::real, "4", "training length in epochs of the train split (used when supervised.steps = 0)", 0.0, 1.0e6},
    {"supervised.steps", T::integer, "0", "training length in optimizer steps; 0: supervised.epochs", 0, 1.0e12},
    {"supervised.feed", T::string, "\"host\"", "host: CPU worker threads gather batches (copied to the GPU on cuda); device: the whole split is gathered on the GPU (cuda only)", {}, {}, {"host", "device"}},
    {"supervised.feed_workers", T::integer, "1", "host feed gather threads (0: min(8, cores))", 0, 64},
};
// clang-format on

// clang-format off
const std::vector<ConfigKey> kOptimizer = {
    {"optimizer.name", T::string, "\"sgd\"", "optimizer", {}, {}, {"sgd", "adam", "adamw"}},
    {"optimizer.lr", T::real, "0.05", "base learning rate (the schedule, or RL's rl.anneal_lr, scales it)", 0.0, 100.0},
    {"optimizer.momentum", T::real, "0.9", "SGD momentum", 0.0, 1.0},
    {"optimizer.nesterov", T::boolean, "true", "SGD Nesterov momentum (needs optimizer.momentum above 0)"},
    {"optimizer.weight_decay", T::real, "5e-4", "weight decay (L2 for sgd/adam, decoupled for adamw)", 0.0, 10.0},
};
// clang-format on

// clang-format off
const std::vector<ConfigKey> kSchedule = {
    {"schedule.name", T::string, "\"cosine\"", "supervised learning-rate schedule: cosine to schedule.min_lr at the last step, step (x schedule.decay_factor every schedule.decay_every_steps), constant", {}, {}, {"constant", "step", "cosine"}},
    {"schedule.warmup_steps", T::integer, "100", "linear warmup steps", 0, 1.0e12},
    {"schedule.min_lr", T::real, "0", "cosine floor", 0.0, 100.0},
    {"schedule.decay_every_steps", T::integer, "1000", "step schedule: steps between decays", 1, 1.0e12},
    {"schedule.decay_factor", T::real, "0.1", "step schedule: what each decay multiplies the learning rate by", 0.0, 1.0},
};
// clang-format on

}  // namespace

SupervisedSettings SupervisedSettings::parse(const Config& c) {
  return {.batch_size = static_cast<std::uint64_t>(c.integer("supervised.batch_size")),
          .epochs = c.real("supervised.epochs"),
          .steps = c.integer("supervised.steps"),
          .feed = c.string("supervised.feed") == "device" ? Feed::device : Feed::host,
          .feed_workers = static_cast<unsigned>(c.integer("supervised.feed_workers"))};
}

std::span<const ConfigKey> SupervisedSettings::keys() { return kSupervised; }

OptimizerSettings OptimizerSettings::parse(const Config& c) {
  OptimizerSettings s{.name = c.string("optimizer.name"),
                      .lr = c.real("optimizer.lr"),
                      .momentum = c.real("optimizer.momentum"),
                      .nesterov = c.boolean("optimizer.nesterov"),
                      .weight_decay = c.real("optimizer.weight_decay")};
  if (!(s.lr > 0)) fail("config: optimizer.lr = {} does not train: set a learning rate above 0", s.lr);
  if (s.name == "sgd" && s.nesterov && s.momentum == 0)
    fail(
        "config: optimizer.nesterov = true needs optimizer.momentum above 0: set a momentum or optimizer.nesterov "
        "= false");
  if (s.momentum >= 1) fail("config: optimizer.momentum = {} must be below 1: lower it", s.momentum);
  return s;
}

std::span<const ConfigKey> OptimizerSettings::keys() { return kOptimizer; }

ScheduleSettings ScheduleSettings::parse(const Config& c) {
  ScheduleSettings s{.name = c.string("schedule.name"),
                     .warmup_steps = c.integer("schedule.warmup_steps"),
                     .min_lr = c.real("schedule.min_lr"),
                     .decay_every_steps = c.integer("schedule.decay_every_steps"),
                     .decay_factor = c.real("schedule.decay_factor")};
  if (s.name == "step" && !(s.decay_factor > 0))
    fail("config: schedule.decay_factor = 0 stops training at the first decay: set a factor above 0");
  return s;
}

std::span<const ConfigKey> ScheduleSettings::keys() { return kSchedule; }

}  // namespace tandem
