// NumPy .npy pairs. A directory holding
//   x_train.npy  y_train.npy     -> split "train"
//   x_test.npy   y_test.npy      -> split "test" (optional)
// becomes the fields x (dtype and per-sample shape of x_*.npy, i.e. shape[1:]) and y. An integer y
// of shape (N,) is stored as int64 (the label convention); any other y keeps its dtype and shape.
// Read: format versions 1-3, C order, little-endian dtypes u1 i1 u2 i2 u4 i4 i8 f2 f4 f8. Everything else, a count mismatch between x and y, or a file whose size disagrees
// with its header (sizes computed with overflow-checked arithmetic; a 0 in the per-sample shape and
// more than shm::kMaxDims dimensions are refused) is a UserError raised before anything is created.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "datasets/load_plan.hpp"

namespace tandem::data {

struct NpyHeader {
  shm::DType dtype;
  std::vector<std::uint64_t> shape;
  std::uint64_t data_offset = 0;  // bytes before the array
  std::uint64_t data_bytes = 0;
};

// Parses and validates one .npy file's header against its size.
NpyHeader read_npy_header(const std::filesystem::path& path);

bool looks_like_npy(const std::filesystem::path& dir);
LoadPlan plan_npy(const std::filesystem::path& dir);

}  // namespace tandem::data
