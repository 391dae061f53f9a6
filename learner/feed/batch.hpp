// What a feed hands out: one Step per next(), holding one Batch per consumer.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <vector>

#include "learner/feed/feed_options.hpp"

namespace tandem::feed {

struct Batch {
  torch::Tensor x;  // float32 [n, sample shape...], normalised
  torch::Tensor y;  // int64 or float32 [n, target shape...], as in the cache
};

// The dtype of a feed's y.
inline torch::ScalarType target_dtype(const FeedLayout& layout) {
  return layout.y_float ? torch::kFloat : torch::kLong;
}

struct Step {
  std::uint64_t epoch = 0;
  std::uint64_t index = 0;     // step within the epoch, < the feed's length()
  std::vector<Batch> batches;  // one per consumer; no two share storage

  std::int64_t samples() const {
    std::int64_t n = 0;
    for (const auto& b : batches) n += b.y.size(0);
    return n;
  }
};

// Consumer k's share of a step of n samples: [n * k / consumers, n * (k + 1) / consumers). A full
// step gives every consumer batch_size samples; a short last step (drop_last off) splits evenly.
inline std::uint64_t consumer_begin(std::uint64_t n, std::uint32_t k, std::uint32_t consumers) {
  return n * k / consumers;
}

}  // namespace tandem::feed
