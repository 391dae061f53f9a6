// Plain IDX: the two halves of the input become train-images-idx3-ubyte and train-labels-idx1-ubyte.
#include "tests/fuzz/dataset_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tandem::fuzz;
  const TwoFiles in = split_input(data, size);
  write_file("train-images-idx3-ubyte", in.first);
  write_file("train-labels-idx1-ubyte", in.second);
  plan_and_load("idx", 8 * size);  // labels widen to int64; images are byte for byte
  return 0;
}
