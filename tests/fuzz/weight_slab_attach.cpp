// The weight slab reader over raw bytes: the input becomes /dev/shm/tandem.fuzz<pid>.weights
// (segment_input.hpp), then the reader attaches (claiming lease entries), reads the tensor table,
// leases and reads the latest version, copies it lease-free, and lists the leases and counters.
// A UserError is the accepted refusal.
#include <vector>

#include "common/error.hpp"
#include "shm/weight_slab.hpp"
#include "tests/fuzz/segment_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tandem;
  const std::string name = shm::job_segment_name(fuzz::own_name(), shm::Kind::weights);
  fuzz::SegmentFromBytes object(name, shm::Kind::weights, shm::kWeightSlabLayoutVersion, data, size);
  try {
    shm::WeightSlabReader reader = shm::WeightSlabReader::attach(name, 2);
    std::uint64_t sum = reader.latest_version();
    for (const auto& t : reader.tensors()) sum += fuzz::touch(reader.slots_begin() + t.offset, t.bytes);
    if (auto lease = reader.lease_latest(4)) {
      sum += fuzz::touch(lease->data(), lease->bytes());
      sum += lease->still_valid();
    }
    std::vector<std::byte> copy(reader.descriptor().slot_bytes);
    if (auto c = reader.copy_latest(copy.data())) sum += c->bytes;
    sum += reader.lease_table().size() + reader.stats().published;
    if (sum == 0xdeadbeef) return 0;  // keeps the reads
  } catch (const UserError&) {
  }
  return 0;
}
