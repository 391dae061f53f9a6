// GPU: a CUDA model published through ModelPublisher (float32 and bf16) and followed by CUDA and CPU
// actors. Skips (77) without a GPU; compiled only against a CUDA LibTorch.
// LibTorch first: Debian's build pulls glog, whose CHECK macro must be overridden by doctest's.
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>
#include <torch/types.h>
#include <torch/utils.h>
// (keep this order)
#include <doctest/doctest.h>

#include "actor/follower.hpp"
#include "learner/model_publisher.hpp"
#include "tests/harness.hpp"
#include "tests/small_net.hpp"

TANDEM_GPU_TEST_BINARY();

#ifdef TANDEM_TORCH_CUDA
using namespace tandem;

namespace {
// 64 -> 256 -> 8: large enough that a copy is not all launch overhead.
struct WideNet : test::SmallNet {
  WideNet() : SmallNet(256, 64, 8) {}
};

void train_step(WideNet& net) {
  torch::optim::SGD opt(net.parameters(), torch::optim::SGDOptions(0.1));
  net.train();
  net.forward(torch::randn({32, 64}, torch::kCUDA)).pow(2).sum().backward();
  opt.step();
}
}  // namespace

TEST_CASE("follower (CUDA): CUDA and CPU actors load what a CUDA learner published, float32 and bf16") {
  for (bool bf16 : {false, true}) {
    torch::manual_seed(0);
    const std::string name = test::unique_name("tandem.test-gpu-follow");
    WideNet learner_net, gpu_actor, cpu_actor;
    learner_net.to(torch::kCUDA);
    gpu_actor.to(torch::kCUDA);
    train_step(learner_net);
    FlatParams lp = FlatParams::flatten(learner_net), gp = FlatParams::flatten(gpu_actor),
               cp = FlatParams::flatten(cpu_actor);
    learner::ModelPublisherOptions opts;
    opts.bf16 = bf16;
    learner::ModelPublisher pub(name, lp, opts);
    actor::Follower gpu_follower(name, gp), cpu_follower(name, cp);
    REQUIRE(pub.publish(1).outcome != learner::Publisher::Outcome::skipped);
    pub.publisher().flush();
    REQUIRE(gpu_follower.update() == std::optional<std::uint64_t>(1));
    REQUIRE(cpu_follower.update() == std::optional<std::uint64_t>(1));
    auto expect = bf16 ? learner_net.fc1->weight.to(torch::kBFloat16).to(torch::kFloat) : learner_net.fc1->weight;
    CHECK(torch::equal(gpu_actor.fc1->weight, expect));
    CHECK(torch::equal(cpu_actor.fc1->weight, expect.cpu()));
    CHECK(torch::equal(cpu_actor.bn->num_batches_tracked, learner_net.bn->num_batches_tracked.cpu()));
    train_step(learner_net);  // the flat buffer moved on: the next publish carries it
    REQUIRE(pub.publish(2).outcome != learner::Publisher::Outcome::skipped);
    pub.publisher().flush();
    REQUIRE(gpu_follower.update() == std::optional<std::uint64_t>(2));
    CHECK(torch::allclose(gpu_actor.fc2->weight, learner_net.fc2->weight, 1e-2, 1e-2));
  }
}
#endif
