// Only a dead writer's weight slab is replaced (learner/model_publisher.hpp): two learners of one node
// cannot unlink each other's live slab.
#include "tests/torch_doctest.hpp"

#include <signal.h>

#include <filesystem>
#include <fstream>
#include <torch/types.h>

#include "common/torch/flat_params.hpp"
#include "common/torch/models.hpp"
#include "learner/model_publisher.hpp"
#include "shm/segment.hpp"
#include "tests/harness.hpp"

using namespace tandem;
using namespace tandem::test;

namespace {

struct Published {
  Model model = Model::create({.name = "mlp"});
  FlatParams flat = FlatParams::flatten(model);
};

learner::ModelPublisher publish(const std::string& slab, Published& p) {
  learner::ModelPublisherOptions o;
  o.replace_dead_writer = true;
  return learner::ModelPublisher(slab, p.flat, o);
}

}  // namespace

// Publishes into the slab named by its first argument, says so through the marker file, and waits to be killed.
TANDEM_CHILD("slab-writer") {
  Published p;
  learner::ModelPublisher pub = publish(child_args()[0], p);
  (void)pub.publish(0);
  std::ofstream(child_args()[1]) << "ready\n";
  for (;;) ::pause();
}

TEST_CASE("model publisher: a slab whose writer is alive is refused; once the writer is dead it is replaced" *
          doctest::timeout(60)) {
  TempDir dir;
  const std::string slab = shm::job_segment_name(unique_name("ddp-pub"), shm::Kind::weights);
  const std::string marker = dir.file("ready");
  Child writer = spawn_child("slab-writer", {slab, marker});
  int status = 0;
  while (!std::filesystem::exists(marker))
    if (writer.wait_for(std::chrono::milliseconds(20), status))
      FAIL("the writer exited (" << status << ") before publishing");

  Published p;
  const std::string refused = error_of([&] { (void)publish(slab, p); });
  CHECK(refused.find("is being written by live process " + std::to_string(writer.pid())) != std::string::npos);
  CHECK(shm::Segment::exists(slab));  // the live writer's slab is untouched

  writer.kill(SIGKILL);
  REQUIRE(writer.wait() == 128 + SIGKILL);
  CHECK(shm::Segment::exists(slab));  // killed: its slab stayed behind, stale
  {
    learner::ModelPublisher replaced = publish(slab, p);
    CHECK(replaced.publish_final(1, 5) == 1);
  }
  CHECK_FALSE(shm::Segment::exists(slab));
}
