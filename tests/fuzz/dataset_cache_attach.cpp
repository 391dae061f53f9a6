// The dataset cache attach over raw bytes: the input becomes /dev/shm/tandem.data.fuzz<pid>
// (segment_input.hpp), then everything `tandem data info` and `data verify` read is read: each
// field's samples, each split's range, the payload checksum. A UserError is the accepted refusal.
#include "common/error.hpp"
#include "shm/dataset_cache.hpp"
#include "tests/fuzz/segment_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tandem;
  const std::string name = fuzz::own_name();
  fuzz::SegmentFromBytes object(shm::dataset_segment_name(name), shm::Kind::dataset, shm::kDatasetLayoutVersion, data,
                                size);
  try {
    const shm::DatasetCache cache = shm::DatasetCache::attach(name);
    const auto& d = cache.descriptor();
    std::uint64_t sum = cache.compute_checksum(1);
    for (std::uint32_t i = 0; i < d.num_fields; ++i) {
      const auto field = cache.field(std::string(d.fields[i].name, strnlen(d.fields[i].name, sizeof d.fields[i].name)));
      for (std::uint32_t s = 0; s < d.num_splits; ++s) {
        const auto split = cache.split(
            std::string(d.splits[s].name, strnlen(d.splits[s].name, sizeof d.splits[s].name)));
        if (split.end > split.begin)  // first and last sample of the split, as a sampler would index them
          sum += fuzz::touch(field.data + split.begin * field.stride, field.stride) +
                 fuzz::touch(field.data + (split.end - 1) * field.stride, field.stride);
      }
      sum += fuzz::touch(field.data, field.stride * cache.num_samples());
    }
    if (sum == 0xdeadbeef) return 0;  // keeps the reads
  } catch (const UserError&) {
  }
  return 0;
}
