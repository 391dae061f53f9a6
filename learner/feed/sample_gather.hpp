// What HostFeed's workers do per chunk: copy samples and targets, picked by row, out of the dataset
// cache into a staging slot. Torch-free; pure functions of their arguments, so any thread may call
// them for disjoint [begin, end) ranges of one slot at once.
#pragma once

#include <cstddef>
#include <cstdint>

#include "learner/feed/feed_options.hpp"

namespace tandem::feed {

// Slot entries j in [begin, end) get cache row rows[j]: x as floats, normalised (x * scale + bias
// per channel), at x + j * x_elements; its target's bytes at y + j * y_stride.
void gather_normalized(const FeedLayout& layout, const std::uint64_t* rows, std::uint64_t begin, std::uint64_t end,
                       float* x, std::byte* y);

// The same rows, raw: x bytes as they are in the cache (the GPU normalises them later).
void gather_bytes(const FeedLayout& layout, const std::uint64_t* rows, std::uint64_t begin, std::uint64_t end,
                  std::byte* x, std::byte* y);

}  // namespace tandem::feed
