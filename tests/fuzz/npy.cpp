// NumPy .npy pairs: the two halves of the input become x_train.npy and y_train.npy.
#include "tests/fuzz/dataset_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tandem::fuzz;
  const TwoFiles in = split_input(data, size);
  write_file("x_train.npy", in.first);
  write_file("y_train.npy", in.second);
  plan_and_load("npy", 8 * size);  // integer labels widen to int64 (at most 8x a byte)
  return 0;
}
