#include "common/torch/model_config.hpp"

#include "common/error.hpp"

namespace tandem {

ModelSpec model_spec_for(const Config& config, std::span<const std::uint64_t> sample_shape) {
  ModelSpec spec{.name = config.string("model.name"),
                 .num_classes = config.integer("model.num_classes"),
                 .seed = static_cast<std::uint64_t>(config.integer("model.seed"))};
  const auto dim = [&](std::size_t i) { return static_cast<std::int64_t>(sample_shape[i]); };
  if (sample_shape.size() == 3) {
    spec.channels = dim(0);
    spec.height = dim(1);
    spec.width = dim(2);
  } else if (sample_shape.size() == 2) {
    spec.channels = 1;
    spec.height = dim(0);
    spec.width = dim(1);
  } else {
    fail("the data's samples have {} dimensions: models need C,H,W or H,W images (re-preload the data)",
         sample_shape.size());
  }
  return spec;
}

}  // namespace tandem
