#include "learner/feed/epoch_sampler.hpp"

#include <algorithm>
#include <numeric>
#include <utility>

#include "common/error.hpp"

namespace tandem::feed {

namespace {

constexpr std::uint64_t kGolden = 0x9E3779B97F4A7C15ULL;

std::uint64_t mix(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// Fisher-Yates from the back: the classic unbiased shuffle, driven by our generator.
void shuffle(std::vector<std::uint64_t>& v, SplitMix64& rng) {
  for (std::size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[rng.bounded(i)]);
}

// Streams of one seed: the shared shard assignment and the per-device order never reuse a sequence,
// even for device 0 whose device seed equals the seed.
std::uint64_t assignment_stream(std::uint64_t epoch) { return 2 * epoch; }
std::uint64_t order_stream(std::uint64_t epoch) { return 2 * epoch + 1; }

}  // namespace

SplitMix64::SplitMix64(std::uint64_t seed, std::uint64_t stream) : state_(mix(seed) ^ mix(stream * kGolden + 1)) {}

std::uint64_t SplitMix64::next() { return mix(state_ += kGolden); }

std::uint64_t SplitMix64::bounded(std::uint64_t bound) {
  unsigned __int128 m = static_cast<unsigned __int128>(next()) * bound;
  auto low = static_cast<std::uint64_t>(m);
  if (low < bound) {
    const std::uint64_t threshold = (0 - bound) % bound;
    while (low < threshold) {
      m = static_cast<unsigned __int128>(next()) * bound;
      low = static_cast<std::uint64_t>(m);
    }
  }
  return static_cast<std::uint64_t>(m >> 64);
}

EpochSampler::EpochSampler(const SamplerOptions& options) : options_(options) {
  if (options.world_size == 0) fail("feed world size is 0: it must be at least 1");
  if (options.rank >= options.world_size)
    fail("feed rank {} is out of range for world size {}: ranks are 0..{}", options.rank, options.world_size,
         options.world_size - 1);
  if (options.batch_size == 0) fail("feed batch size is 0: it must be at least 1");
  if (options.end < options.begin) fail("feed split range [{}, {}) is reversed", options.begin, options.end);
  shard_size_ = (options.end - options.begin) / options.world_size;
  length_ = options.drop_last ? shard_size_ / options.batch_size
                              : (shard_size_ + options.batch_size - 1) / options.batch_size;
}

std::uint64_t EpochSampler::batch_samples(std::uint64_t batch) const {
  const std::uint64_t first = batch * options_.batch_size;
  if (batch >= length_) return 0;
  return std::min(options_.batch_size, shard_size_ - first);
}

std::vector<std::uint64_t> EpochSampler::epoch_order(std::uint64_t epoch) const {
  const std::uint64_t n = options_.end - options_.begin;
  std::vector<std::uint64_t> assignment(n);
  std::iota(assignment.begin(), assignment.end(), options_.begin);
  SplitMix64 shared(options_.seed, assignment_stream(epoch));
  shuffle(assignment, shared);

  std::vector<std::uint64_t> shard(shard_size_);
  for (std::uint64_t k = 0; k < shard_size_; ++k) shard[k] = assignment[options_.rank + k * options_.world_size];

  SplitMix64 device(options_.seed + kDeviceSeedPrime * options_.device_index, order_stream(epoch));
  shuffle(shard, device);
  return shard;
}

}  // namespace tandem::feed
