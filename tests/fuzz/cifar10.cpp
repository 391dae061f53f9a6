// CIFAR-10 binary batches: the two halves of the input become data_batch_1.bin and test_batch.bin
// (an empty second half means no test batch).
#include "tests/fuzz/dataset_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tandem::fuzz;
  const TwoFiles in = split_input(data, size);
  write_file("data_batch_1.bin", in.first);
  if (!in.second.empty()) write_file("test_batch.bin", in.second);
  plan_and_load("cifar10", 8 * size);
  return 0;
}
