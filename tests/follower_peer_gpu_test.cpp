// Two GPUs: a CUDA learner's ModelPublisher on GPU 0 followed by an actor on GPU 1 in another process,
// never torn (every version it loads is whole): GPU to GPU from GPU 0's device slab (CUDA IPC with peer
// access), or from the device slab on GPU 1 that the learner's chain fills. Skips (77) with fewer than 2
// GPUs; compiled only against a CUDA LibTorch.
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
#include <thread>

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
// "<the GPU of the device slab it read, -1: none> <loads> <whole loads>".
TANDEM_CHILD("peer-actor") {
  const auto& args = test::child_args();
  auto net = make_net();
  net->to(torch::Device(torch::kCUDA, 1));
  FlatParams params = FlatParams::flatten(*net);
  actor::Follower follower(args.at(0), params);
  std::ofstream(args.at(1) + ".ready") << "ready\n";  // CUDA is up on GPU 1: the learner may start publishing
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
  std::ofstream(args.at(1)) << follower.device_slab_gpu() << ' ' << loads << ' ' << whole << '\n';
  return 0;
}

namespace {
struct Followed {
  int device_slab_gpu = -2, loads = 0, whole = -1;
};

// A learner on GPU 0 publishes kVersions versions (each parameter v / 4) with `opts`; an actor process
// on GPU 1 follows them. What it saw.
Followed publish_to_an_actor_on_gpu_1(learner::ModelPublisherOptions opts) {
  const std::string name = test::unique_name("tandem.test-gpu-peerfollow");
  auto learner_net = make_net();
  learner_net->to(torch::Device(torch::kCUDA, 0));
  FlatParams lp = FlatParams::flatten(*learner_net);
  opts.device_slab = true;
  learner::ModelPublisher pub(name, lp, opts);
  REQUIRE(pub.device_slab_count() == 1 + opts.peer_gpus.size());

  const std::string result = test::unique_name("/tmp/peerfollow") + ".txt";
  test::Child child = test::spawn_child("peer-actor", {name, result});
  // Publishing before the actor has started CUDA would leave it only the last version to load.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!std::filesystem::exists(result + ".ready") && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  REQUIRE(std::filesystem::exists(result + ".ready"));
  for (std::uint64_t v = 1; v <= kVersions; ++v) {
    set_all(learner_net, float(v) / 4);
    REQUIRE(pub.publish_final(v, 30) == v);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));  // paced, so the actor loads many versions
  }
  int status = -1;
  REQUIRE(child.wait_for(std::chrono::seconds(60), status));
  CHECK(status == 0);
  Followed seen;
  std::ifstream(result) >> seen.device_slab_gpu >> seen.loads >> seen.whole;
  std::filesystem::remove(result);
  std::filesystem::remove(result + ".ready");
  return seen;
}
}  // namespace

TEST_CASE("follower (2 GPUs): an actor on another GPU follows the learner's device slab GPU to GPU, never torn" *
          doctest::timeout(120)) {
  REQUIRE(cuda::can_access_peer(1, 0));  // NVLink or PCIe peer access between the two: the path under test
  const Followed seen = publish_to_an_actor_on_gpu_1({});
  CHECK(seen.device_slab_gpu == 0);  // GPU 0's device slab, read from GPU 1; not the host slab
  CHECK(seen.loads >= 10);           // it may skip versions (the last one it loads is kVersions), never a torn one
  CHECK(seen.whole == seen.loads);
}

TEST_CASE(
    "follower (2 GPUs): an actor on another GPU follows the device slab the chain fills on its own GPU, never torn" *
    doctest::timeout(120)) {
  REQUIRE(cuda::can_access_peer(1, 0));
  learner::ModelPublisherOptions opts;
  opts.peer_gpus = {1};
  const Followed seen = publish_to_an_actor_on_gpu_1(opts);
  CHECK(seen.device_slab_gpu == 1);  // its own GPU's copy, which the learner filled GPU to GPU
  CHECK(seen.loads >= 10);
  CHECK(seen.whole == seen.loads);
}
#endif
