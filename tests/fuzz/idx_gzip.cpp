// Gzip IDX: the two halves of the input are the compressed train-images / train-labels files, so
// headers, trailers and deflate blocks are all mutated.
#include "tests/fuzz/dataset_input.hpp"
#include "datasets/input_file.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tandem::fuzz;
  const TwoFiles in = split_input(data, size);
  write_file("train-images-idx3-ubyte.gz", in.first);
  write_file("train-labels-idx1-ubyte.gz", in.second);
  plan_and_load("idx", 8 * tandem::data::max_gunzip_bytes(size));
  return 0;
}
