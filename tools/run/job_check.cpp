#include "tools/run/job_check.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "common/checked_math.hpp"
#include "common/error.hpp"
#include "common/job_keys.hpp"
#include "shm/dataset_cache.hpp"

namespace tandem::run {
namespace {

void check_model(const Config& c) {
  const std::string name = c.string("model.name");
  if (std::find(kBuiltinModels.begin(), kBuiltinModels.end(), name) != kBuiltinModels.end()) return;
  std::error_code ec;
  if (!std::filesystem::is_regular_file(name, ec))
    fail("config: model.name = \"{}\" is neither a built-in ({}) nor an existing TorchScript file: check the name "
         "or the path", name, fmt::join(kBuiltinModels, ", "));
  std::array<char, 4> magic{};
  std::ifstream in(name, std::ios::binary);
  in.read(magic.data(), magic.size());
  if (!in || std::memcmp(magic.data(), "PK\x03\x04", 4) != 0)
    fail("config: model.name = \"{}\" is not a TorchScript file (not a zip archive): save it with torch.jit.save",
         name);
}

shm::DatasetCache attach_data(const std::string& name) {
  try {
    return shm::DatasetCache::attach(name);
  } catch (const UserError& e) {
    fail("config: data.name = \"{}\": {}", name, e.what());
  }
}

// The split `key` names, its bounds checked against the cache.
shm::SplitSpec used_split(const shm::DatasetCache& cache, const Config& c, const char* key) {
  const std::string name = c.string(key);
  shm::SplitSpec s;
  try {
    s = cache.split(name);
  } catch (const UserError& e) {
    fail("config: {} = \"{}\": {}", key, name, e.what());
  }
  if (s.begin > s.end || s.end > cache.num_samples())
    fail("config: {} = \"{}\": the split [{}, {}) is not within the cache's {} samples: re-preload data.name = "
         "\"{}\" with `tandem data preload --force`", key, name, s.begin, s.end, cache.num_samples(),
         c.string("data.name"));
  if (s.begin == s.end) fail("config: {} = \"{}\" is an empty split: name a split with samples", key, name);
  return s;
}

// Every label of [s.begin, s.end) must be a class of the model: a label outside makes LibTorch's loss
// abort with a backtrace in the learner, or the evaluators crash on every try.
void check_labels(const shm::DatasetCache& cache, const shm::SplitSpec& s, const char* key, std::int64_t classes,
                  const std::string& data) {
  const auto y = cache.field("y");
  const auto offset = static_cast<std::uint64_t>(y.data - cache.segment().base());
  const auto bytes = checked_mul(s.end, y.stride);
  const auto span_end = bytes ? checked_add(offset, *bytes) : std::nullopt;
  if (!span_end || *span_end > cache.segment().size())
    fail("config: data.name = \"{}\": field 'y' lies outside the cache: re-preload it with `tandem data preload "
         "--force`", data);
  for (std::uint64_t i = s.begin; i < s.end; ++i) {
    std::int64_t label = 0;
    std::memcpy(&label, y.data + i * y.stride, sizeof label);
    if (label >= 0 && label < classes) continue;
    if (label < 0)
      fail("config: {} = \"{}\" of data.name = \"{}\" holds label {} at sample {}: labels must be 0 or more; "
           "re-preload the data", key, s.name, data, label, i);
    fail("config: model.num_classes = {} but {} = \"{}\" holds label {} at sample {}: set model.num_classes to "
         "at least {}", classes, key, s.name, label, i, label + 1);
  }
}

// An RL job: rollout actors, an actor-critic, the env; no dataset cache.
void check_rl_job(const Config& c) {
  const std::string algo = c.string("learner.algo");
  const std::int64_t actors = c.integer("run.actors"), evaluators = c.integer("actor.evaluators");
  if (c.string("actor.role") != "rollout")
    fail("config: learner.algo = \"{}\" learns from rollout actors: set actor.role = \"rollout\" (actor.evaluators "
         "of them evaluate)", algo);
  if (evaluators >= actors)
    fail("config: actor.evaluators = {} leaves no rollout actor among run.actors = {}: raise run.actors or lower "
         "actor.evaluators", evaluators, actors);
  const std::string model = c.string("model.name");
  if (model != "actor_critic_mlp" && std::find(kBuiltinModels.begin(), kBuiltinModels.end(), model) != kBuiltinModels.end())
    fail("config: model.name = \"{}\" has no value head: learner.algo = \"{}\" needs \"actor_critic_mlp\" or a "
         "TorchScript actor-critic returning (params, value)", model, algo);
  const std::string env = c.string("env.name"), plugin = c.string("env.plugin");
  std::error_code ec;
  if (env == "plugin" && plugin.empty())
    fail("config: env.name = \"plugin\" but env.plugin is empty: set it to the path of your env's shared library");
  if (env == "plugin" && !std::filesystem::is_regular_file(plugin, ec))
    fail("config: env.plugin = \"{}\" is not a file: give the path of a shared library implementing "
         "envs/tandem_env.h", plugin);
  if (env != "plugin" && !plugin.empty())
    fail("config: env.plugin = \"{}\" is set but env.name = \"{}\": set env.name = \"plugin\" to load it, or "
         "remove env.plugin", plugin, env);
  const std::int64_t per_update = c.integer("rl.slots_per_update"), rollout = actors - evaluators;
  if (c.boolean("run.deterministic") && per_update % rollout != 0)
    fail("config: run.deterministic needs rl.slots_per_update = {} to be a multiple of the {} rollout actors: "
         "set it to {}", per_update, rollout, std::max(rollout, per_update / rollout * rollout));
}

}  // namespace

std::uint32_t rollout_actor_count(const Config& c) {
  if (c.string("actor.role") != "rollout") return 0;
  const std::int64_t n = c.integer("run.actors") - c.integer("actor.evaluators");
  return static_cast<std::uint32_t>(std::max<std::int64_t>(n, 0));
}

void check_job_inputs(const Config& c, std::uint32_t learners) {
  check_model(c);
  if (c.string("learner.algo") != "supervised") return check_rl_job(c);
  if (c.string("actor.role") == "rollout" && c.integer("run.actors") > 0)
    fail("config: actor.role = \"rollout\" needs a learner that learns from experience: set learner.algo = \"ppo\" "
         "or \"vtrace\"");
  if (c.string("learner.feed") == "device" && c.string("learner.device") != "cuda")
    fail("config: learner.feed = \"device\" needs learner.device = \"cuda\": use learner.feed = \"host\"");

  const std::string data = c.string("data.name");
  const shm::DatasetCache cache = attach_data(data);
  const std::string fix = fmt::format("preload image data with labels (`tandem data preload {} --from DIR --force`)", data);
  if (!cache.has_field("x") || !cache.has_field("y"))
    fail("config: data.name = \"{}\" has no field 'x' or 'y': {}", data, fix);
  const auto x = cache.field("x");
  const auto y = cache.field("y");
  if (x.dtype != shm::DType::u8 || (x.sample_shape.size() != 2 && x.sample_shape.size() != 3) || x.stride == 0)
    fail("config: data.name = \"{}\" holds x as {} with {} dimensions: the programs read uint8 images (C,H,W or "
         "H,W): {}", data, shm::dtype_name(x.dtype), x.sample_shape.size(), fix);
  if (y.dtype != shm::DType::i64 || !y.sample_shape.empty() || y.stride != sizeof(std::int64_t))
    fail("config: data.name = \"{}\" holds y as {} with {} dimensions: the programs read one int64 label per "
         "sample: {}", data, shm::dtype_name(y.dtype), y.sample_shape.size(), fix);

  const std::size_t channels = x.sample_shape.size() == 3 ? static_cast<std::size_t>(x.sample_shape[0]) : 1;
  const auto mean = parse_number_list("data.mean", c.string("data.mean"));
  const auto std = parse_number_list("data.std", c.string("data.std"));
  for (const auto& [key, v] : {std::pair{"data.mean", &mean}, std::pair{"data.std", &std}})
    if (v->size() != 1 && v->size() != channels)
      fail("config: {} has {} values but the samples of data.name = \"{}\" have {} channel{}: give {}", key,
           v->size(), data, channels, channels == 1 ? "" : "s",
           channels == 1 ? std::string("one value") : fmt::format("one value or {}", channels));
  if (mean.size() != std.size())
    fail("config: data.mean has {} values and data.std {}: give both one value, or one per channel", mean.size(),
         std.size());
  for (double s : std)
    if (!(s > 0)) fail("config: data.std = \"{}\" holds {}: every entry must be positive", c.string("data.std"), s);

  const std::int64_t classes = c.integer("model.num_classes");
  const shm::SplitSpec train = used_split(cache, c, "data.train_split");
  shm::SplitSpec test = used_split(cache, c, "data.test_split");
  check_labels(cache, train, "data.train_split", classes, data);
  const auto max_samples = static_cast<std::uint64_t>(c.integer("actor.max_samples"));
  if (max_samples > 0) test.end = std::min(test.end, test.begin + max_samples);
  check_labels(cache, test, "data.test_split", classes, data);

  // learner.batch_size counts one step's samples across all ranks; each rank takes its share of the
  // batch from its share of the split.
  const auto batch = static_cast<std::uint64_t>(c.integer("learner.batch_size"));
  if (batch % learners != 0)
    fail("config: learner.batch_size = {} does not divide among the {} learner ranks (it counts one step's samples "
         "across all ranks): use a multiple of {}", batch, learners, learners);
  const std::uint64_t per_rank = (train.end - train.begin) / learners;
  if (batch / learners > per_rank)
    fail("config: learner.batch_size = {} is larger than split '{}' ({} samples): lower it", batch, train.name,
         train.end - train.begin);
  const auto eval_batch = static_cast<std::uint64_t>(c.integer("actor.batch_size"));
  if (eval_batch > test.end - test.begin)
    fail("config: actor.batch_size = {} is larger than split '{}' ({} samples{}): lower it", eval_batch, test.name,
         test.end - test.begin, max_samples > 0 ? ", after actor.max_samples" : "");

  std::int64_t steps = c.integer("learner.steps");
  if (steps == 0) {
    steps = std::llround(c.real("learner.epochs") * static_cast<double>(per_rank / batch));
    if (steps <= 0)
      fail("config: learner.epochs = {} gives no step ({} per epoch): raise it or set learner.steps",
           c.real("learner.epochs"), per_rank / batch);
  }
  if (c.string("learner.schedule") == "cosine" && c.integer("learner.warmup_steps") >= steps)
    fail("config: learner.warmup_steps = {} is not below the run's {} steps: lower it or train longer",
         c.integer("learner.warmup_steps"), steps);
}

}  // namespace tandem::run
