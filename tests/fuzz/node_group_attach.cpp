// The node reduce group over raw bytes: the input becomes /dev/shm/tandem.fuzz<pid>.reduce-1
// (segment_input.hpp); rank 1 of 2 attaches, joins and, when the crafted lanes let it past the
// barriers, runs an all-reduce, a broadcast and (with slots) a slots op through the crafted buffers
// and counters. A UserError is the accepted refusal; a failed barrier (no rank 0 is there) the
// accepted outcome. Seeds: make_segment_seeds.py.
#include <chrono>

#include "common/error.hpp"
#include "shm/node_group.hpp"
#include "tests/fuzz/segment_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tandem;
  using std::chrono::milliseconds;
  const std::string name = shm::reduce_segment_name(fuzz::own_name(), 1, false);
  fuzz::SegmentFromBytes object(name, shm::Kind::reduce, shm::kReduceLayoutVersion, data, size);
  try {
    shm::NodeGroup group = shm::NodeGroup::attach(name, 1, 2);
    if (group.join(milliseconds(0))) {
      float values[3000] = {};
      std::uint8_t riding[100] = {};
      if (group.all_reduce_sum(values, 3000, 0.5f, milliseconds(0), {riding, sizeof riding, 0}))
        (void)group.broadcast(values, sizeof values, 0, milliseconds(0));
      if (group.slot_floats() > 0)  // whatever the crafted counters say, pieces stay inside the slots
        (void)group.finish_slots(group.start_slots(0, group.slot_floats(), 0.5f, {riding, sizeof riding, 0}),
                                 milliseconds(0));
    }
  } catch (const UserError&) {
  }
  return 0;
}
