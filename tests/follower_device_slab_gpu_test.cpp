// GPU: a CUDA learner's ModelPublisher with the device slab on, followed by a CUDA actor in another
// process (CUDA IPC opens no handle in the exporting process) through the device slab, and by a CPU
// actor through the host slab. Skips (77) without a GPU; compiled only against a CUDA LibTorch.
// LibTorch first: Debian's build pulls glog, whose CHECK macro must be overridden by doctest's.
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>
#include <torch/types.h>
#include <torch/utils.h>
// (keep this order)
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>

#include "actor/follower.hpp"
#include "learner/model_publisher.hpp"
#include "shm/weight_slab.hpp"
#include "tests/harness.hpp"

TANDEM_GPU_TEST_BINARY();

#ifdef TANDEM_TORCH_CUDA
using namespace tandem;

namespace {
torch::nn::Sequential make_net() {
  return torch::nn::Sequential(torch::nn::Linear(64, 256), torch::nn::ReLU(), torch::nn::Linear(256, 8));
}
// Every parameter of version v is v / 4: exact in float32 and bf16, so a reader can check it alone.
void set_all(torch::nn::Sequential& net, float value) {
  torch::NoGradGuard no_grad;
  for (auto& p : net->parameters()) p.fill_(value);
}
}  // namespace

// args: slab name, result file. Follows versions 1..3 on cuda:0; writes "<device slab used> <loads> <loads right>".
TANDEM_CHILD("cuda-actor") {
  const auto& args = test::child_args();
  auto net = make_net();
  net->to(torch::kCUDA);
  FlatParams params = FlatParams::flatten(*net);
  actor::Follower follower(args.at(0), params);
  int loads = 0, ok = 0;
  for (std::uint64_t want = 1; want <= 3;) {
    auto v = follower.update();
    if (!v) continue;
    bool all = true;
    for (auto& p : net->parameters()) all = all && torch::all(p == float(*v) / 4).item<bool>();
    ++loads;
    ok += all ? 1 : 0;
    want = *v + 1;
  }
  std::ofstream(args.at(1)) << follower.via_device_slab() << ' ' << loads << ' ' << ok << '\n';
  return 0;
}

TEST_CASE(
    "follower (CUDA): an actor on the learner's GPU follows through the device slab, a CPU actor through the host slab" *
    doctest::timeout(120)) {
  const std::string name = test::unique_name("tandem.test-gpu-devfollow");
  auto learner_net = make_net();
  learner_net->to(torch::kCUDA);
  FlatParams lp = FlatParams::flatten(*learner_net);
  learner::ModelPublisherOptions opts;
  opts.device_slab = true;
  learner::ModelPublisher pub(name, lp, opts);
  REQUIRE(pub.device_slab() != nullptr);
  CHECK(std::filesystem::exists("/dev/shm/" + shm::device_slab_name(name)));

  auto cpu_net = make_net();
  FlatParams cp = FlatParams::flatten(*cpu_net);
  actor::Follower cpu_follower(name, cp);
  CHECK_FALSE(cpu_follower.via_device_slab());

  const std::string result = test::unique_name("/tmp/devfollow") + ".txt";
  test::Child child = test::spawn_child("cuda-actor", {name, result});
  for (std::uint64_t v = 1; v <= 3; ++v) {
    set_all(learner_net, float(v) / 4);
    REQUIRE(pub.publish_final(v, 30) == v);
  }
  int status = -1;
  REQUIRE(child.wait_for(std::chrono::seconds(60), status));
  CHECK(status == 0);
  int via_device = 0, loads = 0, ok = -1;
  std::ifstream(result) >> via_device >> loads >> ok;
  std::filesystem::remove(result);
  CHECK(via_device == 1);
  CHECK(loads >= 1);  // it may skip versions (the last one it loads is 3), never load a wrong one
  CHECK(ok == loads);
  REQUIRE(cpu_follower.update() == std::optional<std::uint64_t>(3));
  for (auto& p : cpu_net->parameters()) CHECK(torch::all(p == 0.75f).item<bool>());
  CHECK(pub.publisher().stats().device_committed == 3);
}
#endif
