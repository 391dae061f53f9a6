// What a model is built from: its name and the shape of the data. Shared by the model registry
// (models.hpp) and the built-in networks (builtin_nets/networks.hpp), which include nothing of each
// other's but this. Plain data; any thread.
#pragma once

#include <cstdint>
#include <string>

namespace tandem {

struct ModelSpec {
  std::string name;           // a built-in name, or a TorchScript file path
  std::int64_t channels = 1;  // input shape of one sample: C, H, W
  std::int64_t height = 28;
  std::int64_t width = 28;
  std::int64_t num_classes = 10;
  std::uint64_t seed = 0;  // seeds LibTorch's default generator before initialising the weights
};

}  // namespace tandem
