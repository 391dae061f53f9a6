// CIFAR-10 binary batches: a directory (or its cifar-10-batches-bin/ subfolder) holding
// data_batch_1.bin ... data_batch_N.bin (split "train", in order) and test_batch.bin (split
// "test"). Each record is 1 label byte (0-9) then 3072 pixel bytes (R, G, B planes of 32x32), so
// the fields are  x: uint8 [3, 32, 32]  and  y: int64 scalar. File sizes are checked (a whole
// number of records) before anything is created; a label above 9 fails the load.
#pragma once

#include <filesystem>

#include "datasets/load_plan.hpp"

namespace tandem::data {

inline constexpr std::size_t kCifarImageBytes = 3 * 32 * 32;
inline constexpr std::size_t kCifarRecordBytes = 1 + kCifarImageBytes;

bool looks_like_cifar10(const std::filesystem::path& dir);
LoadPlan plan_cifar10(const std::filesystem::path& dir);

}  // namespace tandem::data
