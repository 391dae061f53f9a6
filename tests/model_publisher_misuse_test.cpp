// ModelPublisher misused the ways a Python user finds first, on the C++ side, which has the same holes:
// a module changed after its publisher was made, a second publisher of one slab in one process, a slab
// removed or squatted under its name, a version past what `latest` can pack. Each publishes what the
// module holds now or refuses in one line naming the thing; nothing stale goes out in silence.
// LibTorch first: Debian's build pulls glog, whose CHECK macro must be overridden by doctest's.
#include <torch/nn/modules/linear.h>
#include <torch/types.h>
#include <torch/utils.h>
// (keep this order)
#include <doctest/doctest.h>

#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "actor/follower.hpp"
#include "common/error.hpp"
#include "learner/model_publisher.hpp"
#include "shm/segment.hpp"
#include "tests/harness.hpp"

using namespace tandem;
using learner::ModelPublisher;
using learner::Publisher;

namespace {

struct OneLinear : torch::nn::Module {
  OneLinear() { fc = register_module("fc", torch::nn::Linear(8, 4)); }
  torch::nn::Linear fc{nullptr};
};

learner::ModelPublisherOptions replacing() {
  learner::ModelPublisherOptions o;
  o.replace_dead_writer = true;  // as the programs and the Python package create theirs
  return o;
}

// What a fresh follower loads from `slab`.
at::Tensor published_weight(const std::string& slab) {
  OneLinear net;
  FlatParams flat = FlatParams::flatten(net);
  actor::Follower follower(slab, flat);
  REQUIRE(follower.update());
  return net.fc->weight.clone();
}

}  // namespace

TEST_CASE("model publisher: a parameter rebound after construction is published as the module holds it now") {
  const std::string slab = test::unique_name("tandem.test-misuse");
  OneLinear net;
  FlatParams flat = FlatParams::flatten(net);
  ModelPublisher pub(slab, flat, replacing());
  net.fc->weight.set_data(torch::full_like(net.fc->weight, 4.0));
  REQUIRE(pub.publish(1).outcome == Publisher::Outcome::committed);
  CHECK(torch::equal(published_weight(slab), torch::full_like(net.fc->weight, 4.0)));
  CHECK(flat.in_place(0));
}

TEST_CASE("model publisher: a module converted to another dtype is refused by name and publishes nothing") {
  const std::string slab = test::unique_name("tandem.test-misuse");
  OneLinear net;
  FlatParams flat = FlatParams::flatten(net);
  ModelPublisher pub(slab, flat, replacing());
  REQUIRE(pub.publish(1).outcome == Publisher::Outcome::committed);
  net.to(torch::kDouble);
  CHECK(test::error_of([&] { (void)pub.publish(2); }).find("model tensor 'fc.weight' no longer matches") !=
        std::string::npos);
  CHECK(pub.slab().latest_version() == 1);
}

TEST_CASE("model publisher: a second publisher of one slab in one process is refused; the first keeps publishing") {
  const std::string slab = test::unique_name("tandem.test-misuse");
  OneLinear a, b;
  FlatParams fa = FlatParams::flatten(a), fb = FlatParams::flatten(b);
  {
    ModelPublisher first(slab, fa, replacing());
    const std::string refused = test::error_of([&] { ModelPublisher second(slab, fb, replacing()); });
    CHECK(refused.find("is being written by live process " + std::to_string(::getpid()) + " (this one") !=
          std::string::npos);
    REQUIRE(first.publish(1).outcome == Publisher::Outcome::committed);
    CHECK(torch::equal(published_weight(slab), a.fc->weight));
  }
  CHECK_FALSE(shm::Segment::exists(slab));
  ModelPublisher again(slab, fb, replacing());  // once the first is gone, the name is free
  CHECK(again.publish(1).outcome == Publisher::Outcome::committed);
}

TEST_CASE("model publisher: a removed slab is refused at the next publish, and its replacement outlives the old one") {
  const std::string slab = test::unique_name("tandem.test-misuse");
  OneLinear a, b;
  FlatParams fa = FlatParams::flatten(a), fb = FlatParams::flatten(b);
  auto old = std::make_unique<ModelPublisher>(slab, fa, replacing());
  REQUIRE(shm::Segment::unlink(slab));  // `tandem shm rm`
  CHECK(test::error_of([&] { (void)old->publish(1); }).find("was removed while this publisher was writing it") !=
        std::string::npos);
  ModelPublisher replacement(slab, fb, replacing());
  old.reset();  // removes only its own object
  CHECK(shm::Segment::exists(slab));
  CHECK(replacement.publish(1).outcome == Publisher::Outcome::committed);
}

TEST_CASE("model publisher: an object Tandem did not make at the slab's name is refused and left in place") {
  const std::string slab = test::unique_name("tandem.test-misuse");
  const std::string path = "/dev/shm/" + slab;
  std::ofstream(path) << std::string(8192, 'x');
  OneLinear net;
  FlatParams flat = FlatParams::flatten(net);
  const std::string refused = test::error_of([&] { ModelPublisher pub(slab, flat, replacing()); });
  CHECK(refused.find("'" + path + "' is not a Tandem segment (no Tandem header)") != std::string::npos);
  CHECK(refused.find("rm " + path) != std::string::npos);
  CHECK(shm::Segment::exists(slab));
  std::remove(path.c_str());
}

TEST_CASE("model publisher: versions past what the slab's `latest` word packs are refused by name") {
  const std::string slab = test::unique_name("tandem.test-misuse");
  OneLinear net;
  FlatParams flat = FlatParams::flatten(net);
  auto o = replacing();
  o.when.after_version = shm::kMaxVersion;
  CHECK(test::error_of([&] {
          ModelPublisher pub(slab, flat, o);
        }).find("publisher after_version=72057594037927935 is out of range") != std::string::npos);
  CHECK_FALSE(shm::Segment::exists(slab));
}
