#include "learner/feed/sample_gather.hpp"

#include <cstring>

namespace tandem::feed {

void gather_normalized(const FeedLayout& layout, const std::uint64_t* rows, std::uint64_t begin, std::uint64_t end,
                       float* x, std::int64_t* y) {
  const std::uint64_t stride = layout.x_stride;
  for (std::uint64_t j = begin; j < end; ++j) {
    const auto* in = reinterpret_cast<const std::uint8_t*>(layout.x + rows[j] * stride);
    float* out = x + j * stride;
    for (std::uint32_t c = 0; c < layout.channels; ++c) {
      const float scale = layout.scale[c], bias = layout.bias[c];
      const std::uint8_t* in_c = in + c * layout.plane;
      float* out_c = out + c * layout.plane;
      for (std::uint64_t e = 0; e < layout.plane; ++e) out_c[e] = static_cast<float>(in_c[e]) * scale + bias;
    }
    std::memcpy(&y[j], layout.y + rows[j] * sizeof(std::int64_t), sizeof(std::int64_t));
  }
}

void gather_bytes(const FeedLayout& layout, const std::uint64_t* rows, std::uint64_t begin, std::uint64_t end,
                  std::uint8_t* x, std::int64_t* y) {
  const std::uint64_t stride = layout.x_stride;
  for (std::uint64_t j = begin; j < end; ++j) {
    std::memcpy(x + j * stride, layout.x + rows[j] * stride, stride);
    std::memcpy(&y[j], layout.y + rows[j] * sizeof(std::int64_t), sizeof(std::int64_t));
  }
}

}  // namespace tandem::feed
