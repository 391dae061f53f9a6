// GPU: an AOTInductor package made from the built-in resnet18 (tools/export_aoti.py) as an actor's
// model, following published versions with outputs equal to eager's on each
// (common/torch/aoti_package.hpp). Skips (77) without a GPU; needs LibTorch 2.x with AOTInductor.
#include "tests/torch_doctest.hpp"

#include <torch/torch.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "actor/follower.hpp"
#include "common/torch/aoti_package.hpp"
#include "common/torch/flat_params.hpp"
#include "common/torch/models.hpp"
#include "learner/model_publisher.hpp"
#include "tests/harness.hpp"
#include "tests/tensor_compare.hpp"

TANDEM_GPU_TEST_BINARY();

using namespace tandem;
using testing::kGpu;
using testing::relative_l2;

namespace {

ModelSpec resnet18() {
  return {.name = "resnet18", .channels = 3, .height = 32, .width = 32, .num_classes = 10, .seed = 4};
}

}  // namespace

TEST_CASE("an AOTInductor package of the built-in resnet18 follows three published versions, equal to eager on each" *
          doctest::timeout(280)) {
  REQUIRE(torch::cuda::is_available());
  if (auto why = AotiPackage::unsupported()) FAIL("AOTInductor is unavailable although a GPU is: " << *why);
  const std::string package =
      (std::filesystem::temp_directory_path() / (test::unique_name("resnet18") + ".pt2")).string();
  const std::string source = test::source_root();
  const std::string python = std::getenv("TANDEM_PYTHON") ? std::getenv("TANDEM_PYTHON") : "python3";
  const std::string export_cmd = python + " " + source +
                                 "/tools/export_aoti.py --builtin resnet18 --max-batch 512 -o " + package;
  REQUIRE(std::system(export_cmd.c_str()) == 0);

  // The learner: a plain resnet18 publishing; the actor: resnet18's tensors with the package as forward.
  Model learner = Model::create(resnet18());
  learner.to(kGpu);
  FlatParams learner_flat = FlatParams::flatten(learner);
  Model actor = Model::create(resnet18());
  actor.to(kGpu);
  actor.set_package(package);
  actor.eval();
  FlatParams actor_flat = FlatParams::flatten(actor);
  const std::string slab = test::unique_name("tandem.test-aoti");
  learner::ModelPublisher publisher(slab, learner_flat, {});
  actor::Follower follower(slab, actor_flat);

  torch::manual_seed(9);
  const torch::Tensor x = torch::randn({256, 3, 32, 32}, kGpu);
  torch::Tensor previous;
  for (std::uint64_t version = 1; version <= 3; ++version) {
    CAPTURE(version);
    {  // a new version: every parameter and BatchNorm statistic moves
      torch::NoGradGuard no_grad;
      for (auto& [n, p] : learner.named_parameters()) p.add_(torch::randn_like(p) * 0.05);
      for (auto& [n, b] : learner.named_buffers())
        if (b.is_floating_point()) b.uniform_(0.5, 1.5);
    }
    REQUIRE(publisher.publish(version).outcome != learner::Publisher::Outcome::skipped);
    publisher.publisher().flush();
    REQUIRE(follower.update() == std::optional<std::uint64_t>(version));
    actor.weights_changed();
    torch::NoGradGuard no_grad;
    learner.eval();
    const torch::Tensor want = learner.forward(x);
    learner.train();
    const torch::Tensor got = actor.forward(x);
    INFO("package vs eager: relative L2 ", relative_l2(got, want));
    CHECK(relative_l2(got, want) < 1e-3);  // TF32 convolutions on both sides, summed in other orders
    if (previous.defined()) CHECK(relative_l2(got, previous) > 1e-2);  // it did follow
    previous = got.clone();
  }
  std::filesystem::remove(package);
}
