#include "shm/dataset_check.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "common/checked_math.hpp"
#include "common/error.hpp"

namespace tandem::shm {
namespace {

DatasetCache attach(const std::string& name) {
  try {
    return DatasetCache::attach(name);
  } catch (const UserError& e) {
    fail("config: data.name = \"{}\": {}", name, e.what());
  }
}

// The split `key` names, its bounds checked against the cache.
SplitSpec used_split(const DatasetCache& cache, const char* key, const std::string& name, const std::string& data) {
  SplitSpec s;
  try {
    s = cache.split(name);
  } catch (const UserError& e) {
    fail("config: {} = \"{}\": {}", key, name, e.what());
  }
  if (s.begin > s.end || s.end > cache.num_samples())
    fail(
        "config: {} = \"{}\": the split [{}, {}) is not within the cache's {} samples: re-preload data.name = "
        "\"{}\" with `tandem data preload --force`",
        key, name, s.begin, s.end, cache.num_samples(), data);
  if (s.begin == s.end) fail("config: {} = \"{}\" is an empty split: name a split with samples", key, name);
  return s;
}

void check_labels(const DatasetCache& cache, const SplitSpec& s, const char* key, std::int64_t classes,
                  const std::string& data) {
  const auto y = cache.field("y");
  const auto offset = static_cast<std::uint64_t>(y.data - cache.segment().base());
  const auto bytes = checked_mul(s.end, y.stride);
  const auto span_end = bytes ? checked_add(offset, *bytes) : std::nullopt;
  if (!span_end || *span_end > cache.segment().size())
    fail(
        "config: data.name = \"{}\": field 'y' lies outside the cache: re-preload it with `tandem data preload "
        "--force`",
        data);
  for (std::uint64_t i = s.begin; i < s.end; ++i) {
    std::int64_t label = 0;
    std::memcpy(&label, y.data + i * y.stride, sizeof label);
    if (label >= 0 && label < classes) continue;
    if (label < 0)
      fail(
          "config: {} = \"{}\" of data.name = \"{}\" holds label {} at sample {}: labels must be 0 or more; "
          "re-preload the data",
          key, s.name, data, label, i);
    fail(
        "config: model.num_classes = {} but {} = \"{}\" holds label {} at sample {}: set model.num_classes to "
        "at least {}",
        classes, key, s.name, label, i, label + 1);
  }
}

void check_fields(const DatasetCache& cache, const JobSettings& s) {
  const std::string& data = s.data.name;
  const std::string fix = fmt::format("preload image data with labels (`tandem data preload {} --from DIR --force`)",
                                      data);
  if (!cache.has_field("x") || !cache.has_field("y"))
    fail("config: data.name = \"{}\" has no field 'x' or 'y': {}", data, fix);
  const auto x = cache.field("x");
  const auto y = cache.field("y");
  if (x.dtype != DType::u8 || (x.sample_shape.size() != 2 && x.sample_shape.size() != 3) || x.stride == 0)
    fail(
        "config: data.name = \"{}\" holds x as {} with {} dimensions: the programs read uint8 images (C,H,W or "
        "H,W): {}",
        data, dtype_name(x.dtype), x.sample_shape.size(), fix);
  if (y.dtype != DType::i64 || !y.sample_shape.empty() || y.stride != sizeof(std::int64_t))
    fail(
        "config: data.name = \"{}\" holds y as {} with {} dimensions: the programs read one int64 label per "
        "sample: {}",
        data, dtype_name(y.dtype), y.sample_shape.size(), fix);
  const std::size_t channels = x.sample_shape.size() == 3 ? static_cast<std::size_t>(x.sample_shape[0]) : 1;
  // DataSettings::parse made mean and std the same length.
  if (s.data.mean.size() != 1 && s.data.mean.size() != channels)
    fail(
        "config: data.mean and data.std have {} values but the samples of data.name = \"{}\" have {} channel{}: "
        "give {}",
        s.data.mean.size(), data, channels, channels == 1 ? "" : "s",
        channels == 1 ? std::string("one value") : fmt::format("one value or {}", channels));
}

}  // namespace

JobData attach_job_data(const JobSettings& s, bool evaluated) {
  JobData d{.cache = attach(s.data.name), .train = {}, .test = {}};
  check_fields(d.cache, s);
  d.train = used_split(d.cache, "data.train_split", s.data.train_split, s.data.name);
  check_labels(d.cache, d.train, "data.train_split", s.model.num_classes, s.data.name);
  if (!evaluated) return d;
  d.test = used_split(d.cache, "data.test_split", s.data.test_split, s.data.name);
  const auto max_samples = static_cast<std::uint64_t>(s.actor.max_samples);
  if (max_samples > 0) d.test.end = std::min(d.test.end, d.test.begin + max_samples);
  check_labels(d.cache, d.test, "data.test_split", s.model.num_classes, s.data.name);
  const auto eval_batch = static_cast<std::uint64_t>(s.actor.batch_size);
  if (eval_batch > d.test.end - d.test.begin)
    fail("config: actor.batch_size = {} is larger than split '{}' ({} samples{}): lower it", eval_batch, d.test.name,
         d.test.end - d.test.begin, max_samples > 0 ? ", after actor.max_samples" : "");
  return d;
}

}  // namespace tandem::shm
