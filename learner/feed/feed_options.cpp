#include "learner/feed/feed_options.hpp"

#include <cmath>
#include <cstring>

#include "common/checked_math.hpp"
#include "common/error.hpp"
#include "shm/dataset_cache.hpp"

namespace tandem::feed {

SamplerOptions FeedLayout::sampler(const FeedOptions& options) const {
  return SamplerOptions{.begin = begin,
                        .end = end,
                        .rank = options.rank,
                        .world_size = options.world_size,
                        .batch_size = options.batch_size * options.consumers,
                        .seed = options.seed,
                        .device_index = options.device_index,
                        .drop_last = options.drop_last};
}

std::vector<std::int64_t> FeedLayout::batch_shape(std::uint64_t samples) const {
  std::vector<std::int64_t> shape{static_cast<std::int64_t>(samples)};
  shape.insert(shape.end(), sample_shape.begin(), sample_shape.end());
  return shape;
}

std::vector<std::int64_t> FeedLayout::y_batch_shape(std::uint64_t samples) const {
  std::vector<std::int64_t> shape{static_cast<std::int64_t>(samples)};
  shape.insert(shape.end(), y_shape.begin(), y_shape.end());
  return shape;
}

FeedLayout describe_feed(const shm::DatasetCache& cache, const FeedOptions& options) {
  const auto& d = cache.descriptor();
  FeedLayout layout;
  layout.dataset.assign(d.name, strnlen(d.name, sizeof d.name));
  const std::string& name = layout.dataset;

  if (options.batch_size == 0) fail("feed batch_size is 0: it must be at least 1");
  if (options.consumers == 0) fail("feed consumers is 0: it must be at least 1");

  auto x = cache.field("x");
  if (x.dtype != shm::DType::u8 && x.dtype != shm::DType::f32)
    fail(
        "dataset cache '{}' field 'x' is {}: the feeds read uint8 or float32 samples (save x as one of them and "
        "preload it again)",
        name, shm::dtype_name(x.dtype));
  auto y = cache.field("y");
  if (y.dtype != shm::DType::i64 && y.dtype != shm::DType::f32)
    fail(
        "dataset cache '{}' field 'y' is {}: the feeds read int64 labels or float32 targets (save y as one of "
        "them and preload it again)",
        name, shm::dtype_name(y.dtype));
  if (x.stride == 0) fail("dataset cache '{}' field 'x' has empty samples", name);

  layout.x = x.data;
  layout.x_float = x.dtype == shm::DType::f32;
  layout.x_stride = x.stride;
  layout.x_elements = x.stride / shm::dtype_size(x.dtype);
  for (auto dim : x.sample_shape) layout.sample_shape.push_back(static_cast<std::int64_t>(dim));
  layout.y = y.data;
  layout.y_float = y.dtype == shm::DType::f32;
  layout.y_stride = y.stride;
  for (auto dim : y.sample_shape) layout.y_shape.push_back(static_cast<std::int64_t>(dim));
  auto split = cache.split(options.split);
  layout.begin = split.begin;
  layout.end = split.end;

  const std::uint64_t image_channels = x.sample_shape.size() >= 2 ? x.sample_shape[0] : 1;
  if (options.mean.size() != options.stddev.size())
    fail("feed mean has {} values and stddev {}: give both one value, or one per channel", options.mean.size(),
         options.stddev.size());
  if (options.mean.size() != 1 && options.mean.size() != image_channels)
    fail("feed mean/stddev have {} values but dataset '{}' samples have {} channels: give 1 or {}", options.mean.size(),
         name, image_channels, image_channels);
  layout.channels = static_cast<std::uint32_t>(options.mean.size());
  layout.plane = layout.x_elements / layout.channels;
  const float range = layout.x_float ? 1.0f : 255.0f;  // uint8 samples are scaled to [0, 1] first
  for (std::size_t c = 0; c < options.mean.size(); ++c) {
    if (!std::isfinite(options.mean[c])) fail("feed mean[{}] is {}: it must be a finite number", c, options.mean[c]);
    if (!(options.stddev[c] > 0.0f) || !std::isfinite(options.stddev[c]))
      fail("feed stddev[{}] is {}: it must be a finite number > 0", c, options.stddev[c]);
    layout.scale.push_back(1.0f / (range * options.stddev[c]));
    layout.bias.push_back(-options.mean[c] / options.stddev[c]);
  }
  return layout;
}

EpochSampler make_feed_sampler(const FeedLayout& layout, const FeedOptions& options) {
  // A step is staged whole (batch_size x consumers samples): more than the rank's shard holds would
  // be one short step in an allocation for the whole (std::bad_alloc for a batch of 2^40), so it is
  // refused here, before any is made. With drop_last such a step is none: the sampler's error says so.
  const std::uint64_t shard = options.world_size > 0 ? (layout.end - layout.begin) / options.world_size : 0;
  const auto step = checked_mul(options.batch_size, std::uint64_t{options.consumers});
  if (shard > 0 && options.consumers > shard)
    fail(
        "feed consumers={} is out of range: rank {} of {} reads {} samples of split '{}' of dataset '{}', so use 1..{}",
        options.consumers, options.rank, options.world_size, shard, options.split, layout.dataset, shard);
  if (shard > 0 && (!step || (*step > shard && !options.drop_last)))
    fail(
        "feed batch_size={} is out of range: rank {} of {} reads {} samples of split '{}' of dataset '{}', so use "
        "batch_size 1..{} with {} consumer(s)",
        options.batch_size, options.rank, options.world_size, shard, options.split, layout.dataset,
        shard / options.consumers, options.consumers);
  EpochSampler sampler(layout.sampler(options));
  if (sampler.length() == 0) {
    if (sampler.shard_size() == 0)
      fail("split '{}' of dataset '{}' has {} samples, fewer than world size {}: every rank needs at least one",
           options.split, layout.dataset, layout.end - layout.begin, options.world_size);
    fail(
        "split '{}' of dataset '{}' gives rank {} of {} only {} samples, fewer than one step of {} ({} x {} "
        "consumers) with drop_last: lower batch_size or turn drop_last off",
        options.split, layout.dataset, options.rank, options.world_size, sampler.shard_size(),
        options.batch_size * options.consumers, options.batch_size, options.consumers);
  }
  return sampler;
}

}  // namespace tandem::feed
