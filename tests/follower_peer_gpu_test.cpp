// Two GPUs: a CUDA learner's ModelPublisher with the device slab on GPU 0, followed by an actor on
// GPU 1 in another process, GPU to GPU through the device slab (CUDA IPC with peer access), never
// torn: every version it loads is whole. Skips (77) with fewer than 2 GPUs; compiled only against a
// CUDA LibTorch.
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
#include "common/cuda_ipc.hpp"
#include "learner/model_publisher.hpp"
#include "shm/weight_slab.hpp"
#include "tests/harness.hpp"

TANDEM_MULTI_GPU_TEST_BINARY(2);

#ifdef TANDEM_TORCH_CUDA
using namespace tandem;

namespace {
constexpr std::uint64_t kVersions = 200;

torch::nn::Sequential make_net() {
  return torch::nn::Sequential(torch::nn::Linear(256, 1024), torch::nn::ReLU(), torch::nn::Linear(1024, 256));
}
// Every parameter of version v is v / 4: exact in float32, so a reader can tell a whole version from a
// torn one (parameters of two versions) alone.
void set_all(torch::nn::Sequential& net, float value) {
  torch::NoGradGuard no_grad;
  for (auto& p : net->parameters()) p.fill_(value);
}
}  // namespace

// args: slab name, result file. Follows on cuda:1 until version kVersions; writes
// "<device slab used> <loads> <whole loads>".
TANDEM_CHILD("peer-actor") {
  const auto& args = test::child_args();
  auto net = make_net();
  net->to(torch::Device(torch::kCUDA, 1));
  FlatParams params = FlatParams::flatten(*net);
  actor::Follower follower(args.at(0), params);
  int loads = 0, whole = 0;
  for (std::uint64_t want = 1; want <= kVersions;) {
    auto v = follower.update();
    if (!v) continue;
    bool all = true;
    for (auto& p : net->parameters()) all = all && torch::all(p == float(*v) / 4).item<bool>();
    ++loads;
    whole += all ? 1 : 0;
    want = *v + 1;
  }
  std::ofstream(args.at(1)) << follower.via_device_slab() << ' ' << loads << ' ' << whole << '\n';
  return 0;
}

TEST_CASE("follower (2 GPUs): an actor on another GPU follows the learner's device slab GPU to GPU, never torn" *
          doctest::timeout(120)) {
  REQUIRE(cuda::can_access_peer(1, 0));  // NVLink or PCIe peer access between the two: the path under test
  const std::string name = test::unique_name("tandem.test-gpu-peerfollow");
  auto learner_net = make_net();
  learner_net->to(torch::Device(torch::kCUDA, 0));
  FlatParams lp = FlatParams::flatten(*learner_net);
  learner::ModelPublisherOptions opts;
  opts.device_slab = true;
  learner::ModelPublisher pub(name, lp, opts);
  REQUIRE(pub.device_slab() != nullptr);

  const std::string result = test::unique_name("/tmp/peerfollow") + ".txt";
  test::Child child = test::spawn_child("peer-actor", {name, result});
  for (std::uint64_t v = 1; v <= kVersions; ++v) {
    set_all(learner_net, float(v) / 4);
    REQUIRE(pub.publish_final(v, 30) == v);
  }
  int status = -1;
  REQUIRE(child.wait_for(std::chrono::seconds(60), status));
  CHECK(status == 0);
  int via_device = 0, loads = 0, whole = -1;
  std::ifstream(result) >> via_device >> loads >> whole;
  std::filesystem::remove(result);
  CHECK(via_device == 1);  // GPU to GPU, not through the host slab
  CHECK(loads >= 2);       // it may skip versions (the last one it loads is kVersions), never load a torn one
  CHECK(whole == loads);
}
#endif
