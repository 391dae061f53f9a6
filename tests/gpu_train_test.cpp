// GPU: the model registry, trainer, checkpoints and evaluator on a CUDA device (LibTorch with CUDA).
// Without a GPU this binary prints SKIP and exits 77.
#include <torch/cuda.h>
#include <torch/types.h>
#include <torch/utils.h>
// After LibTorch: Debian's c10 pulls in glog, whose CHECK must not replace doctest's.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include "actor/evaluator.hpp"
#include "common/torch/models.hpp"
#include "learner/trainer.hpp"
#include "shm/dataset_cache.hpp"
#include "tests/harness.hpp"
#include "tests/tensor_compare.hpp"

TANDEM_GPU_TEST_BINARY();

using namespace tandem;
using testing::kGpu;
namespace fs = std::filesystem;

namespace {

// Two classes told apart by the mean brightness of the image.
std::pair<torch::Tensor, torch::Tensor> bright_or_dark(std::int64_t n, torch::Device device) {
  torch::manual_seed(1);
  torch::Tensor y = torch::randint(2, {n}, torch::kInt64);
  torch::Tensor x = torch::randn({n, 3, 32, 32}) * 0.5 + (y.to(torch::kFloat32) * 2 - 1).view({n, 1, 1, 1});
  return {x.to(device), y.to(device)};
}

}  // namespace

TEST_CASE("gpu: every built-in model runs on the GPU and its parameters live there") {
  REQUIRE(torch::cuda::is_available());
  for (const char* name : {"mlp", "cnn", "resnet18"}) {
    CAPTURE(name);
    Model m = Model::create({.name = name, .channels = 3, .height = 32, .width = 32, .num_classes = 10});
    m.to(kGpu);
    CHECK(m.device() == kGpu);
    CHECK(m.forward(torch::randn({4, 3, 32, 32}, kGpu)).sizes() == torch::IntArrayRef({4, 10}));
  }
}

TEST_CASE("gpu: resnet18 trains on the GPU, checkpoints from it, and resumes to the same weights") {
  REQUIRE(torch::cuda::is_available());
  auto [x, y] = bright_or_dark(256, kGpu);
  TrainerConfig config;
  config.optimizer = {.kind = "sgd", .lr = 0.05, .momentum = 0.9, .nesterov = true, .weight_decay = 5e-4};
  config.schedule = {.kind = "cosine", .warmup_steps = 2, .total_steps = 40};
  Model m = Model::create({.name = "resnet18", .channels = 3, .height = 32, .width = 32, .num_classes = 2, .seed = 1});
  m.to(kGpu);
  Trainer t(m, config);
  for (int i = 0; i < 20; ++i)
    t.train_step(x.slice(0, (i % 4) * 64, (i % 4 + 1) * 64), y.slice(0, (i % 4) * 64, (i % 4 + 1) * 64));
  WindowMetrics w = t.take_window();
  CHECK(w.loss < 0.5);
  CHECK(w.samples == 20 * 64);

  const fs::path dir = fs::temp_directory_path() / test::unique_name("tandem-gpu-ckpt");
  fs::create_directories(dir);
  t.save_checkpoint(checkpoint_path(dir.string(), t.step()));
  Model m2 = Model::create({.name = "resnet18", .channels = 3, .height = 32, .width = 32, .num_classes = 2, .seed = 9});
  m2.to(kGpu);
  Trainer t2(m2, config);
  t2.load_checkpoint(latest_checkpoint(dir.string()).value());
  fs::remove_all(dir);
  CHECK(t2.step() == 20);
  auto a = m.named_parameters(), b = m2.named_parameters();
  for (std::size_t i = 0; i < a.size(); ++i) CHECK(torch::equal(a[i].second, b[i].second));
  CHECK(b[0].second.device() == kGpu);
}

TEST_CASE("gpu: the evaluator on the GPU agrees with the evaluator on the CPU") {
  REQUIRE(torch::cuda::is_available());
  const std::string name = test::unique_name("gpueval");
  struct Unlink {
    std::string n;
    ~Unlink() { shm::Segment::unlink(shm::dataset_segment_name(n)); }
  } unlink{name};
  {
    shm::DatasetSpec spec{.name = name,
                          .source = "test",
                          .format = "synthetic",
                          .num_samples = 500,
                          .fields = {{"x", shm::DType::u8, {3, 32, 32}}, {"y", shm::DType::i64, {}}},
                          .splits = {{"test", 0, 500}}};
    shm::DatasetWriter w = shm::DatasetWriter::create(spec, false);
    torch::Tensor xs = torch::randint(256, {500, 3, 32, 32}, torch::kUInt8);
    torch::Tensor ys = torch::randint(10, {500}, torch::kInt64);
    std::memcpy(w.field_data(0), xs.data_ptr(), xs.numel());
    std::memcpy(w.field_data(1), ys.data_ptr(), ys.numel() * 8);
    w.commit(0, 1);
  }
  shm::DatasetCache cache = shm::DatasetCache::attach(name);
  Model m = Model::create({.name = "cnn", .channels = 3, .height = 32, .width = 32, .num_classes = 10, .seed = 3});
  const EvalResult cpu =
      Evaluator(cache, {.batch_size = 128, .mean = {0.5, 0.5, 0.5}, .std = {0.25, 0.25, 0.25}}).evaluate(m);
  m.to(kGpu);
  const EvalResult gpu = Evaluator(
                             cache,
                             {.batch_size = 128, .mean = {0.5, 0.5, 0.5}, .std = {0.25, 0.25, 0.25}, .device = kGpu})
                             .evaluate(m);
  CHECK(gpu.samples == 500);
  CHECK(std::abs(gpu.accuracy - cpu.accuracy) <= 0.01);  // TF32/cuDNN may flip a borderline argmax
  CHECK(gpu.loss == doctest::Approx(cpu.loss).epsilon(1e-3));
}
