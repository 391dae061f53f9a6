// Publisher (model side) and Follower on CPU models: copy, zero-copy, bf16, signature errors.
// LibTorch first: Debian's build pulls glog, whose CHECK macro must be overridden by doctest's.
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>
#include <torch/types.h>
#include <torch/utils.h>
// (keep this order)
#include <doctest/doctest.h>

#include "actor/follower.hpp"
#include "common/error.hpp"
#include "learner/model_publisher.hpp"
#include "tests/harness.hpp"
#include "tests/small_net.hpp"

using namespace tandem;
using actor::Follower;
using actor::LoadMode;
using learner::ModelPublisher;

namespace {

void train_step(test::SmallNet& net) {
  torch::optim::SGD opt(net.parameters(), torch::optim::SGDOptions(0.1));
  net.train();
  net.forward(torch::randn({8, 8})).pow(2).sum().backward();
  opt.step();
}

learner::ModelPublisherOptions options(std::string model, bool bf16 = false) {
  learner::ModelPublisherOptions o;
  o.model = std::move(model);
  o.bf16 = bf16;
  return o;
}

bool same_outputs(test::SmallNet& a, test::SmallNet& b) {
  a.eval();
  b.eval();
  auto x = torch::randn({4, 8});
  return torch::equal(a.forward(x), b.forward(x));
}

}  // namespace

TEST_CASE("follower: a CPU actor copies each new version and reports the version it runs") {
  torch::manual_seed(0);
  const std::string name = test::unique_name("tandem.test-follow");
  test::SmallNet learner_net, actor_net;
  FlatParams lp = FlatParams::flatten(learner_net), ap = FlatParams::flatten(actor_net);
  ModelPublisher pub(name, lp, options("net"));
  Follower follower(name, ap, {.mode = LoadMode::copy, .model = "net"});
  CHECK_FALSE(follower.has_new());
  CHECK_FALSE(follower.update());

  REQUIRE(pub.publish(10).outcome == learner::Publisher::Outcome::committed);
  CHECK(follower.has_new());
  CHECK(follower.update() == std::optional<std::uint64_t>(1));
  CHECK(follower.version() == 1);
  CHECK(follower.step() == 10);
  CHECK(same_outputs(learner_net, actor_net));

  train_step(learner_net);
  CHECK_FALSE(same_outputs(learner_net, actor_net));
  REQUIRE(pub.publish(11).outcome == learner::Publisher::Outcome::committed);
  CHECK(follower.update() == std::optional<std::uint64_t>(2));
  CHECK(same_outputs(learner_net, actor_net));
  CHECK(torch::equal(learner_net.bn->num_batches_tracked, actor_net.bn->num_batches_tracked));
  CHECK(follower.reader().lease_table().front().has_lease == false);  // copy mode holds nothing
}

TEST_CASE("follower: zero-copy runs the model straight from the leased slot and moves its lease along") {
  torch::manual_seed(1);
  const std::string name = test::unique_name("tandem.test-follow");
  test::SmallNet learner_net, actor_net;
  FlatParams lp = FlatParams::flatten(learner_net), ap = FlatParams::flatten(actor_net);
  ModelPublisher pub(name, lp);
  Follower follower(name, ap, {.mode = LoadMode::zero_copy});
  REQUIRE(pub.publish(1).outcome == learner::Publisher::Outcome::committed);
  REQUIRE(follower.update());
  CHECK(test::mapping_of(actor_net.fc1->weight.data_ptr()) == "/dev/shm/" + name);  // the slot, not a copy
  CHECK(same_outputs(learner_net, actor_net));
  for (int i = 0; i < 6; ++i) {  // more publishes than slots: the held slot is never overwritten
    train_step(learner_net);
    REQUIRE(pub.publish(2 + i).outcome == learner::Publisher::Outcome::committed);
  }
  REQUIRE(follower.update());
  CHECK(follower.version() == 7);
  CHECK(same_outputs(learner_net, actor_net));
  int held = 0;
  for (const auto& row : follower.reader().lease_table()) held += row.has_lease;
  CHECK(held == 1);
}

TEST_CASE("follower: a bf16 slab is widened back to float32 on load") {
  torch::manual_seed(2);
  const std::string name = test::unique_name("tandem.test-follow");
  test::SmallNet learner_net, actor_net;
  train_step(learner_net);  // non-trivial BatchNorm statistics and counter
  FlatParams lp = FlatParams::flatten(learner_net), ap = FlatParams::flatten(actor_net);
  ModelPublisher pub(name, lp, options("net", true));
  CHECK(pub.slab().descriptor().slot_bytes == lp.bytes() - lp.float32_bytes() / 2);
  CHECK_THROWS_AS(Follower(name, ap, {.mode = LoadMode::zero_copy}), UserError);
  Follower follower(name, ap);
  REQUIRE(pub.publish(3).outcome == learner::Publisher::Outcome::committed);
  REQUIRE(follower.update());
  CHECK(torch::allclose(learner_net.fc1->weight, actor_net.fc1->weight, 1e-2, 1e-2));
  CHECK(torch::equal(learner_net.fc1->weight.to(torch::kBFloat16).to(torch::kFloat), actor_net.fc1->weight));
  CHECK(torch::equal(learner_net.bn->num_batches_tracked, actor_net.bn->num_batches_tracked));
}

TEST_CASE("follower: an actor built with another architecture gets one line naming both signatures") {
  const std::string name = test::unique_name("tandem.test-follow");
  test::SmallNet learner_net(16), actor_net(32);
  FlatParams lp = FlatParams::flatten(learner_net), ap = FlatParams::flatten(actor_net);
  ModelPublisher pub(name, lp, options("mlp16"));
  std::string message;
  try {
    Follower follower(name, ap, {.model = "mlp32"});
  } catch (const UserError& e) {
    message = e.what();
  }
  MESSAGE(message);
  CHECK(message.find(lp.signature_hex()) != std::string::npos);
  CHECK(message.find(ap.signature_hex()) != std::string::npos);
  CHECK(message.find("mlp16") != std::string::npos);
  CHECK(message.find('\n') == std::string::npos);
}

TEST_CASE("follower: an in-place write into a zero-copy model stays in this process and never faults") {
  torch::manual_seed(3);
  const std::string name = test::unique_name("tandem.test-follow");
  test::SmallNet learner_net, actor_net;
  FlatParams lp = FlatParams::flatten(learner_net), ap = FlatParams::flatten(actor_net);
  ModelPublisher pub(name, lp);
  Follower follower(name, ap, {.mode = LoadMode::zero_copy});
  REQUIRE(pub.publish(1).outcome == learner::Publisher::Outcome::committed);
  REQUIRE(follower.update());
  actor_net.train();
  (void)actor_net.forward(torch::randn({8, 8}));  // BatchNorm updates its running statistics in place
  {
    torch::NoGradGuard no_grad;
    actor_net.fc1->weight.mul_(0);
  }
  test::SmallNet fresh;
  FlatParams fp = FlatParams::flatten(fresh);
  Follower reader(name, fp);
  REQUIRE(reader.update());
  CHECK(same_outputs(learner_net, fresh));  // the slab still holds what was published
  CHECK(torch::equal(fresh.bn->running_mean, learner_net.bn->running_mean));
}

TEST_CASE("follower: a model rebound after binding is loaded into, a converted one refused by name") {
  const std::string name = test::unique_name("tandem.test-follow");
  test::SmallNet learner_net, actor_net;
  FlatParams lp = FlatParams::flatten(learner_net), ap = FlatParams::flatten(actor_net);
  ModelPublisher pub(name, lp);
  Follower follower(name, ap);
  actor_net.fc1->weight.set_data(torch::zeros_like(actor_net.fc1->weight));
  REQUIRE(pub.publish(1).outcome == learner::Publisher::Outcome::committed);
  REQUIRE(follower.update());
  CHECK(torch::equal(actor_net.fc1->weight, learner_net.fc1->weight));
  actor_net.fc2->weight.set_data(actor_net.fc2->weight.to(torch::kHalf));
  CHECK(test::error_of([&] { (void)follower.update(); }).find("model tensor 'fc2.weight' no longer matches") !=
        std::string::npos);
}
