// The ModelSpec a job config describes: [model] plus the sample shape of the data it trains on.
// tandem-learner and tandem-actor both build their network from it, so they build the same one (or
// the follower's signature check says which differs).
#pragma once

#include <cstdint>
#include <span>

#include "common/config.hpp"
#include "common/torch/models.hpp"

namespace tandem {

// sample_shape: one sample's dimensions, C,H,W or H,W (one channel); anything else is a UserError.
ModelSpec model_spec_for(const Config& config, std::span<const std::uint64_t> sample_shape);

}  // namespace tandem
