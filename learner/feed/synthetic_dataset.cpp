#include "learner/feed/synthetic_dataset.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>
#include <utility>

#include "shm/dataset_cache.hpp"

namespace tandem::feed {

struct SyntheticDataset::Guard {
  explicit Guard(std::string segment) : segment(std::move(segment)) {}
  ~Guard() { shm::Segment::unlink(segment); }
  std::string segment;
};

void SyntheticDataset::fill_sample(std::uint64_t sample, std::span<std::uint8_t> out) {
  std::uint64_t state = sample * 0x9E3779B97F4A7C15ULL + 0x632BE59BD9B4E019ULL;
  for (std::size_t at = 0; at < out.size(); at += 8) {
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z ^= z >> 31;
    std::memcpy(out.data() + at, &z, std::min<std::size_t>(8, out.size() - at));
  }
}

SyntheticDataset::SyntheticDataset(std::string name, std::uint64_t train, std::uint64_t test,
                                   std::vector<std::uint64_t> sample_shape, SyntheticKind kind)
    : name_(std::move(name)) {
  const auto start = std::chrono::steady_clock::now();
  const bool regression = kind == SyntheticKind::regression;
  shm::DatasetSpec spec;
  spec.name = name_;
  spec.source = "synthetic";
  spec.format = "synthetic";
  spec.num_samples = train + test;
  spec.fields = {{"x", regression ? shm::DType::f32 : shm::DType::u8, sample_shape},
                 regression ? shm::FieldSpec{"y", shm::DType::f32, {2}} : shm::FieldSpec{"y", shm::DType::i64, {}}};
  spec.splits = {{"train", 0, train}, {"test", train, train + test}};
  auto writer = shm::DatasetWriter::create(spec, /*force=*/false);
  guard_ = std::make_unique<Guard>(writer.segment_name());

  const std::uint64_t stride = writer.descriptor().fields[0].stride, y_stride = writer.descriptor().fields[1].stride;
  std::byte* x = writer.field_data(0);
  std::byte* y = writer.field_data(1);
  const std::uint64_t elements = regression ? stride / sizeof(float) : stride;
  const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  {
    std::vector<std::jthread> pool;
    for (unsigned t = 0; t < threads; ++t)
      pool.emplace_back([&, t] {
        std::vector<std::uint8_t> pattern(elements);
        for (std::uint64_t i = t; i < spec.num_samples; i += threads) {
          fill_sample(i, pattern);
          if (regression) {
            auto* xi = reinterpret_cast<float*>(x + i * stride);
            for (std::uint64_t e = 0; e < elements; ++e) xi[e] = regression_x(pattern[e]);
            const auto target = regression_y(i);
            std::memcpy(y + i * y_stride, target.data(), sizeof target);
          } else {
            std::memcpy(x + i * stride, pattern.data(), stride);
            const auto label = static_cast<std::int64_t>(i);
            std::memcpy(y + i * y_stride, &label, sizeof label);
          }
        }
      });
  }
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start);
  writer.commit(static_cast<std::uint64_t>(ns.count()), threads);
}

SyntheticDataset::~SyntheticDataset() = default;
SyntheticDataset::SyntheticDataset(SyntheticDataset&&) noexcept = default;
SyntheticDataset& SyntheticDataset::operator=(SyntheticDataset&&) noexcept = default;

}  // namespace tandem::feed
