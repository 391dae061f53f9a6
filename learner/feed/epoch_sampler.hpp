// EpochSampler: which samples of a split one rank reads, in which order, epoch by epoch.
// Torch-free and deterministic: the same options give the same order in every process on every
// machine (our own generator, never torch's or the standard library's distributions).
//
// Sharding is DistributedSampler(drop_last=True)'s: a permutation of the split's N samples seeded by
// (seed, epoch) -- identical on every rank -- is cut to floor(N/W)*W entries, and rank r takes
// positions r, r+W, r+2W, ... So every rank gets shard_size() = floor(N/W) samples, the shards are
// disjoint, and together they cover all but N mod W samples (a different few each epoch).
// Within its shard, a rank's order is shuffled again by a generator seeded by
// (seed + kDeviceSeedPrime * device_index, epoch): two devices with the same data give different
// orders, and a device's order does not depend on which process or machine computes it.
//
// Batches cut the ordered shard into runs of batch_size. With drop_last the final short run is
// dropped; without it, it is the last (shorter) batch. length() is exact in both cases.
//
// Threads: construction validates; every const method is a pure function, callable from any thread.
#pragma once

#include <cstdint>
#include <vector>

namespace tandem::feed {

inline constexpr std::uint64_t kDeviceSeedPrime = 1'000'003;

struct SamplerOptions {
  std::uint64_t begin = 0;  // the split's samples are [begin, end) of the cache
  std::uint64_t end = 0;
  std::uint32_t rank = 0;
  std::uint32_t world_size = 1;
  std::uint64_t batch_size = 1;  // samples per batch (a feed's step: batch per consumer * consumers)
  std::uint64_t seed = 0;
  std::uint32_t device_index = 0;
  bool drop_last = false;
};

class EpochSampler {
 public:
  explicit EpochSampler(const SamplerOptions& options);  // UserError on rank/world/batch misuse

  const SamplerOptions& options() const { return options_; }
  std::uint64_t shard_size() const { return shard_size_; }  // floor(N / world_size)
  std::uint64_t length() const { return length_; }          // batches per epoch
  std::uint64_t batch_samples(std::uint64_t batch) const;   // samples in batch `batch` (< length())

  // This rank's shard_size() absolute sample indices (begin + k) in epoch `epoch`'s order;
  // batch b is entries [b * batch_size, b * batch_size + batch_samples(b)).
  std::vector<std::uint64_t> epoch_order(std::uint64_t epoch) const;

 private:
  SamplerOptions options_;
  std::uint64_t shard_size_ = 0;
  std::uint64_t length_ = 0;
};

// SplitMix64 (Steele, Lea, Flood 2014): a tiny generator with a fully specified output sequence.
// bounded() maps to [0, bound) without bias (Lemire's multiply-and-reject).
class SplitMix64 {
 public:
  // Seeds from (seed, stream) so that distinct streams of one seed are independent sequences.
  SplitMix64(std::uint64_t seed, std::uint64_t stream);
  std::uint64_t next();
  std::uint64_t bounded(std::uint64_t bound);

 private:
  std::uint64_t state_;
};

}  // namespace tandem::feed
