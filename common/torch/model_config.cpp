#include "common/torch/model_config.hpp"

#include <torch/cuda.h>

#include "common/error.hpp"

namespace tandem {

ModelSpec model_spec_for(const ModelSettings& settings, std::span<const std::uint64_t> sample_shape) {
  ModelSpec spec{.name = settings.name, .num_classes = settings.num_classes, .seed = settings.seed};
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

torch::Device device_for(const DeviceSetting& setting, std::string_view key, int own_gpu) {
  if (!setting.cuda) return torch::Device(torch::kCPU);
  const auto gpus = static_cast<int>(torch::cuda::device_count());
  if (gpus == 0)
    fail("config: {} = \"{}\" but LibTorch sees no GPU: use \"cpu\" or run on a GPU machine", key, setting.str());
  const int gpu = setting.gpu(own_gpu);
  if (gpu >= gpus)
    fail("config: {} = \"{}\" needs GPU {} but LibTorch sees {} (cuda:0..cuda:{}): name one of those", key,
         setting.str(), gpu, gpus, gpus - 1);
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(gpu));
}

}  // namespace tandem
