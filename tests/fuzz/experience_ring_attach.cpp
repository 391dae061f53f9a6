// The experience rings over raw bytes: the input becomes /dev/shm/tandem.fuzz<pid>.exp
// (segment_input.hpp), then the learner attaches and, for the first rings, peeks, verifies and
// releases a slot; an actor attaches as the writer of ring 0 and commits one slot. A UserError is
// the accepted refusal. Seeds: make_ring_seeds.py.
#include "common/error.hpp"
#include "shm/experience_ring.hpp"
#include "tests/fuzz/segment_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tandem;
  const std::string job = fuzz::own_name();
  const std::string name = shm::job_segment_name(job, shm::Kind::experience);
  fuzz::SegmentFromBytes object(name, shm::Kind::experience, shm::kExperienceLayoutVersion, data, size);
  try {
    shm::ExperienceRings rings = shm::ExperienceRings::attach(job);
    std::uint64_t sum = 0;
    for (std::uint32_t a = 0; a < rings.descriptor().num_actors && a < 4; ++a) {
      if (auto slot = rings.peek(a)) {
        sum += fuzz::touch(slot->bytes(), rings.descriptor().slot_bytes);
        sum += rings.verify(a, *slot);
        rings.release(a);
      }
    }
    shm::ExperienceWriter writer = shm::ExperienceWriter::attach(job, 0);
    if (auto slot = writer.begin_write()) {
      slot->header().episodes = 0;
      writer.commit(*slot);
    }
    if (sum == 0xdeadbeef) return 0;  // keeps the reads
  } catch (const UserError&) {
  }
  return 0;
}
