// MNIST / Fashion-MNIST IDX files, plain or gzip-compressed. A directory holding
//   train-images-idx3-ubyte[.gz]  train-labels-idx1-ubyte[.gz]   -> split "train"
//   t10k-images-idx3-ubyte[.gz]   t10k-labels-idx1-ubyte[.gz]    -> split "test" (optional)
// ('.' instead of the '-' before "idx" is accepted too) becomes the fields
//   x: uint8 [1, H, W]     y: int64 scalar (the label byte)
// with train samples first. Only unsigned-byte IDX (type 0x08) is read. Counts and sizes are
// checked (overflow-checked arithmetic) against the file sizes before anything is created; a .gz
// must fit deflate's maximum ratio (1032:1) and is inflated once to prove it holds exactly what
// its header claims, so no header can make a preload reserve shared memory for absent data.
#pragma once

#include <filesystem>

#include "datasets/load_plan.hpp"

namespace tandem::data {

bool looks_like_idx(const std::filesystem::path& dir);
LoadPlan plan_idx(const std::filesystem::path& dir);

}  // namespace tandem::data
