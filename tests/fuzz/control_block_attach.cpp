// The control block attach over raw bytes: the input becomes /dev/shm/tandem.fuzz<pid>.ctl
// (segment_input.hpp), then everything `tandem status` reads is read: the job, every row's snapshot
// and metrics record, the stop request. A UserError is the accepted refusal.
#include "common/error.hpp"
#include "shm/control_block.hpp"
#include "tests/fuzz/segment_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tandem;
  const std::string job = fuzz::own_name();
  fuzz::SegmentFromBytes object(shm::job_segment_name(job, shm::Kind::control), shm::Kind::control,
                                shm::kControlLayoutVersion, data, size);
  try {
    const shm::ControlBlock block = shm::ControlBlock::attach(job, shm::Segment::Access::read_only);
    std::uint64_t sum = block.job().size() + static_cast<std::uint32_t>(block.stop_reason());
    for (std::uint32_t i = 0; i < block.row_count(); ++i) {
      const auto s = block.snapshot(i);
      sum += s.name().size() + s.heartbeat_ns + (s.metrics ? s.metrics->step : 0);
      sum += shm::state_name(s.state).size();
    }
    if (sum == 0xdeadbeef) return 0;  // keeps the reads
  } catch (const UserError&) {
  }
  return 0;
}
