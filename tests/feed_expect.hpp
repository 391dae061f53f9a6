// What a feed's batch must hold, recomputed from a SyntheticDataset's pattern: label = sample index
// (classification) or {index, index + 0.5} (regression), x = the sample's values normalised with
// the feed's scale/bias. Shared by the feed test binaries.
#pragma once

#include "tests/torch_doctest.hpp"

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "learner/feed/batch.hpp"
#include "learner/feed/feed_options.hpp"
#include "learner/feed/synthetic_dataset.hpp"

namespace tandem::test {

inline torch::Tensor expected_x(const feed::FeedLayout& layout, const std::vector<std::int64_t>& rows) {
  auto x = torch::empty(layout.batch_shape(rows.size()), torch::kFloat);
  float* out = x.data_ptr<float>();
  std::vector<std::uint8_t> pattern(layout.x_elements);
  for (std::size_t r = 0; r < rows.size(); ++r) {
    feed::SyntheticDataset::fill_sample(static_cast<std::uint64_t>(rows[r]), pattern);
    for (std::uint64_t e = 0; e < layout.x_elements; ++e) {
      const std::uint64_t c = (e / layout.plane) % layout.channels;
      const float v = layout.x_float ? feed::SyntheticDataset::regression_x(pattern[e])
                                     : static_cast<float>(pattern[e]);
      out[r * layout.x_elements + e] = v * layout.scale[c] + layout.bias[c];
    }
  }
  return x;
}

inline torch::Tensor expected_y(const feed::FeedLayout& layout, const std::vector<std::int64_t>& rows) {
  if (!layout.y_float) return torch::tensor(rows, torch::kLong);
  auto y = torch::empty(layout.y_batch_shape(rows.size()), torch::kFloat);
  for (std::size_t r = 0; r < rows.size(); ++r) {
    const auto target = feed::SyntheticDataset::regression_y(static_cast<std::uint64_t>(rows[r]));
    std::copy(target.begin(), target.end(), y.data_ptr<float>() + r * target.size());
  }
  return y;
}

// Checks a batch (on any device) against the samples `rows` (absolute cache indices).
inline void check_batch(const feed::FeedLayout& layout, const feed::Batch& batch,
                        const std::vector<std::int64_t>& rows) {
  auto y = batch.y.cpu();
  REQUIRE(y.size(0) == static_cast<std::int64_t>(rows.size()));
  CHECK(y.dtype() == feed::target_dtype(layout));
  CHECK(batch.x.dtype() == torch::kFloat);
  CHECK(torch::equal(y, expected_y(layout, rows)));
  CHECK(torch::allclose(batch.x.cpu(), expected_x(layout, rows), 1e-5, 1e-5));
}

// [begin, end) byte ranges of every tensor of a step must not overlap.
inline bool storage_disjoint(const feed::Step& step) {
  std::vector<std::pair<std::uintptr_t, std::uintptr_t>> ranges;
  for (const auto& b : step.batches)
    for (const auto* t : {&b.x, &b.y})
      if (t->numel() > 0) {
        auto p = reinterpret_cast<std::uintptr_t>(t->data_ptr());
        ranges.emplace_back(p, p + t->numel() * t->element_size());
      }
  std::sort(ranges.begin(), ranges.end());
  for (std::size_t i = 1; i < ranges.size(); ++i)
    if (ranges[i].first < ranges[i - 1].second) return false;
  return true;
}

// The rows of step `index` of `epoch_order` for consumer c (feed::consumer_begin's split).
inline std::vector<std::int64_t> rows_of(const std::vector<std::uint64_t>& epoch_order, std::uint64_t step_offset,
                                         std::uint64_t n, std::uint32_t c, std::uint32_t consumers) {
  std::vector<std::int64_t> rows;
  for (auto j = feed::consumer_begin(n, c, consumers); j < feed::consumer_begin(n, c + 1, consumers); ++j)
    rows.push_back(static_cast<std::int64_t>(epoch_order[step_offset + j]));
  return rows;
}

// Takes `epochs` epochs of steps from `feed` and checks each step: epoch and index, one batch per
// consumer holding exactly the sampler's samples for it, batches sharing no storage.
template <class Feed>
void check_epochs(Feed& feed, const feed::FeedLayout& layout, const feed::FeedOptions& o, std::uint64_t first_epoch,
                  std::uint64_t epochs) {
  const auto& sampler = feed.sampler();
  const std::uint64_t step_samples = o.batch_size * o.consumers;
  for (std::uint64_t e = first_epoch; e < first_epoch + epochs; ++e) {
    const auto order = sampler.epoch_order(e);
    for (std::uint64_t i = 0; i < feed.length(); ++i) {
      CAPTURE(e);
      CAPTURE(i);
      const auto step = feed.next();
      CHECK(step.epoch == e);
      CHECK(step.index == i);
      REQUIRE(step.batches.size() == o.consumers);
      CHECK(storage_disjoint(step));
      const std::uint64_t n = sampler.batch_samples(i);
      CHECK(step.samples() == static_cast<std::int64_t>(n));
      for (std::uint32_t c = 0; c < o.consumers; ++c)
        check_batch(layout, step.batches[c], rows_of(order, i * step_samples, n, c, o.consumers));
    }
  }
}

}  // namespace tandem::test
