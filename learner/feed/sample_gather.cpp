#include "learner/feed/sample_gather.hpp"

#include <cstring>

namespace tandem::feed {
namespace {

template <typename In>
void normalize_sample(const FeedLayout& layout, const std::byte* sample, float* out) {
  const auto* in = reinterpret_cast<const In*>(sample);
  for (std::uint32_t c = 0; c < layout.channels; ++c) {
    const float scale = layout.scale[c], bias = layout.bias[c];
    const In* in_c = in + c * layout.plane;
    float* out_c = out + c * layout.plane;
    for (std::uint64_t e = 0; e < layout.plane; ++e) out_c[e] = static_cast<float>(in_c[e]) * scale + bias;
  }
}

}  // namespace

void gather_normalized(const FeedLayout& layout, const std::uint64_t* rows, std::uint64_t begin, std::uint64_t end,
                       float* x, std::byte* y) {
  for (std::uint64_t j = begin; j < end; ++j) {
    const std::byte* sample = layout.x + rows[j] * layout.x_stride;
    float* out = x + j * layout.x_elements;
    if (layout.x_float) normalize_sample<float>(layout, sample, out);
    else normalize_sample<std::uint8_t>(layout, sample, out);
    std::memcpy(y + j * layout.y_stride, layout.y + rows[j] * layout.y_stride, layout.y_stride);
  }
}

void gather_bytes(const FeedLayout& layout, const std::uint64_t* rows, std::uint64_t begin, std::uint64_t end,
                  std::byte* x, std::byte* y) {
  const std::uint64_t stride = layout.x_stride;
  for (std::uint64_t j = begin; j < end; ++j) {
    std::memcpy(x + j * stride, layout.x + rows[j] * stride, stride);
    std::memcpy(y + j * layout.y_stride, layout.y + rows[j] * layout.y_stride, layout.y_stride);
  }
}

}  // namespace tandem::feed
