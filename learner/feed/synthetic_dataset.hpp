// A dataset cache of generated samples, for the feeds' tests and `tandem bench feed`. Torch-free.
// Two kinds:
//  - classification: field "x" is uint8 with the given sample shape, filled with a pseudo-random
//    pattern that is a pure function of (sample, byte) (fill_sample), so a test can recompute what
//    any sample must hold; field "y" is int64 and holds the sample's own index, so a batch's labels
//    say which samples it carries.
//  - regression: "x" is float32, each element the same pattern's byte minus 128 (regression_x);
//    "y" is float32 [2] per sample, {index, index + 0.5} (regression_y).
// Every value is exact in float32, so a test compares bit for bit before normalisation.
// Splits: "train" = [0, train), "test" = [train, train + test).
//
// The handle owns the segment: it is created committed (ready) and unlinked when the handle is
// destroyed (a program that may be interrupted adds shm::UnlinkOnSignal for the name).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace tandem::feed {

enum class SyntheticKind { classification, regression };

class SyntheticDataset {
 public:
  // Fails (UserError) if a cache of that name exists.
  SyntheticDataset(std::string name, std::uint64_t train, std::uint64_t test, std::vector<std::uint64_t> sample_shape,
                   SyntheticKind kind = SyntheticKind::classification);
  ~SyntheticDataset();
  SyntheticDataset(SyntheticDataset&&) noexcept;
  SyntheticDataset& operator=(SyntheticDataset&&) noexcept;

  const std::string& name() const { return name_; }

  static void fill_sample(std::uint64_t sample, std::span<std::uint8_t> out);
  static float regression_x(std::uint8_t pattern_byte) { return static_cast<float>(pattern_byte) - 128.0f; }
  static std::array<float, 2> regression_y(std::uint64_t sample) {
    return {static_cast<float>(sample), static_cast<float>(sample) + 0.5f};
  }

 private:
  struct Guard;
  std::string name_;
  std::unique_ptr<Guard> guard_;
};

}  // namespace tandem::feed
