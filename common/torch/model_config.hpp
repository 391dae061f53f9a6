// The LibTorch objects a job's settings describe: the ModelSpec of [model] for the data it trains on,
// and the device of learner.device / actor.device. tandem-learner and tandem-actor both build their
// network from the spec, so they build the same one (or the follower's signature check says which
// differs).
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <span>
#include <string_view>

#include "common/settings/data.hpp"
#include "common/settings/learner.hpp"
#include "common/torch/models.hpp"

namespace tandem {

// sample_shape: one sample's dimensions, C,H,W or H,W (one channel); anything else is a UserError.
ModelSpec model_spec_for(const ModelSettings& settings, std::span<const std::uint64_t> sample_shape);

// `setting` (read from `key`) as a torch::Device: "cuda" is GPU `own_gpu`. A GPU that LibTorch does
// not see is a UserError naming the key.
torch::Device device_for(const DeviceSetting& setting, std::string_view key, int own_gpu);

}  // namespace tandem
