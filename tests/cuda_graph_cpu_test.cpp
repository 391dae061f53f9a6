// CUDA graphs where there is no GPU to capture on: the captured optimizer path's formulas (which run
// on CPU tensors too), the eager fallback of a CPU job with learner/actor.cuda_graph = true, and
// `tandem bench graph`'s one-line refusal without a GPU. The captured steps themselves are in
// cuda_graph_test.cpp (GPU suite).
#include <torch/cuda.h>
#include <torch/types.h>
#include <torch/utils.h>
// After LibTorch: Debian's c10 pulls in glog, whose CHECK must not replace doctest's.
#include <doctest/doctest.h>

#include <fmt/format.h>

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <functional>
#include <sstream>
#include <filesystem>
#include <fstream>
#include <string>

#include "actor/evaluator.hpp"
#include "common/file_descriptor.hpp"
#include "common/torch/models.hpp"
#include "learner/captured_train_step.hpp"
#include "learner/optim.hpp"
#include "learner/trainer.hpp"
#include "tests/harness.hpp"
#include "tests/script_models.hpp"
#include "tests/tiny_cache.hpp"

using namespace tandem;
namespace fs = std::filesystem;

namespace {

// The same parameters updated `steps` times by step(lr) or by set_step_coefficients(lr) + step_captured().
torch::Tensor train(const OptimizerConfig& config, const ScheduleConfig& schedule, bool captured, int steps) {
  torch::manual_seed(7);
  torch::Tensor flat = torch::randn({300}).requires_grad_(true);
  Optimizer opt({{"w", flat}}, config);
  for (int s = 0; s < steps; ++s) {
    flat.mutable_grad() = torch::sin(flat.detach() * (s + 1));  // a gradient that changes every step
    const double lr = scheduled_lr(schedule, config.lr, s);
    if (captured) {
      opt.set_step_coefficients(lr);
      opt.step_captured();
    } else {
      opt.step(lr);
    }
  }
  return flat.detach().clone();
}

// What fn writes to stderr (the log's file descriptor) while it runs.
std::string stderr_of(const std::function<void()>& fn) {
  const test::TempDir dir;
  const std::string path = dir.file("stderr.txt");
  {
    const FileDescriptor file(::open(path.c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0600));
    REQUIRE(file.get() >= 0);
    const FileDescriptor saved(::dup(STDERR_FILENO));
    ::dup2(file.get(), STDERR_FILENO);
    try {
      fn();
    } catch (...) {
      ::dup2(saved.get(), STDERR_FILENO);
      throw;
    }
    ::dup2(saved.get(), STDERR_FILENO);
  }
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

TEST_CASE("a TorchScript model falls back to eager with one line") {
  const test::TinyCache cache("graphjit");
  const test::TempDir dir;
  test::save_linear_torchscript(dir.file("linear.pt"), 64, 8);  // 1x8x8 inputs
  Model model = Model::create(
      {.name = dir.file("linear.pt"), .channels = 1, .height = 8, .width = 8, .num_classes = 8});
  // On the GPU machine on the GPU, where a graph could otherwise be captured.
  const torch::Device device = torch::cuda::is_available() ? torch::Device(torch::kCUDA, 0)
                                                           : torch::Device(torch::kCPU);
  model.to(device);

  Trainer trainer(model, {.optimizer = {}, .schedule = {.kind = "constant"}});
  const auto why = CapturedTrainStep::unsupported(trainer);
  REQUIRE(why.has_value());
  CHECK(why->find("TorchScript") != std::string::npos);

  const shm::DatasetCache attached = shm::DatasetCache::attach(cache.name);
  const EvalConfig eager_config{.batch_size = 64, .mean = {0.5}, .std = {0.3}, .device = device};
  EvalConfig graph_config = eager_config;
  graph_config.cuda_graph = true;
  const Evaluator eager(attached, eager_config), graphed(attached, graph_config);
  const EvalResult expected = eager.evaluate(model);
  EvalResult first, second;
  const std::string log = stderr_of([&] {
    first = graphed.evaluate(model);
    second = graphed.evaluate(model);
  });
  INFO(log);
  CHECK(test::count_of(log, "actor.cuda_graph = true, evaluating eagerly: a TorchScript model is not captured") == 1);
  CHECK(test::count_of(log, "\n") == 1);
  CHECK_FALSE(graphed.graph_active());
  CHECK(first.loss == expected.loss);
  CHECK(second.accuracy == expected.accuracy);
}

TEST_CASE("the captured optimizer step reads lr and bias corrections from the device and matches the eager step") {
  const ScheduleConfig cosine{.kind = "cosine", .warmup_steps = 5, .total_steps = 40};
  for (const char* kind : {"sgd", "adam", "adamw"}) {
    CAPTURE(kind);
    const OptimizerConfig config{.kind = kind, .lr = 0.1, .momentum = 0.9, .nesterov = true, .weight_decay = 1e-2};
    const torch::Tensor eager = train(config, cosine, false, 40);
    const torch::Tensor captured = train(config, cosine, true, 40);
    // On the CPU a division by a host scalar divides, the captured path multiplies by the reciprocal:
    // the last bit may differ (on CUDA both multiply). A missed schedule or bias correction is far off.
    const double rel = (eager - captured).norm().item<double>() / eager.norm().item<double>();
    CHECK(rel < 1e-5);
    // The schedule reaches the captured path: a constant lr gives other weights.
    const torch::Tensor constant = train(config, {.kind = "constant"}, true, 40);
    CHECK((constant - captured).norm().item<double>() / captured.norm().item<double>() > 1e-3);
  }
}

TEST_CASE("a CPU learner with cuda_graph = true trains eagerly and says why, once" * doctest::timeout(120)) {
  const test::TinyCache cache("graphcpu");
  const test::TempDir dir;
  const fs::path config = fs::path(dir.path()) / "job.toml";
  std::ofstream(config) << test::tiny_job_config(
      {.job = test::unique_name("graphjob"),
       .dataset = cache.name,
       .run_keys = fmt::format("actors = 1\nrun_dir = \"{}\"", (fs::path(dir.path()) / "run").string()),
       .keys = R"(supervised.batch_size = 32
supervised.steps = 60
schedule.warmup_steps = 5
publish.every_steps = 20
checkpoint.every_steps = 0
learner.cuda_graph = true
actor.min_interval_s = 0.1
actor.batch_size = 64
actor.cuda_graph = true)"});
  const auto r = test::run_command(fmt::format("{} run '{}' 2>&1", test::tandem_binary(), config.string()));
  INFO(r.output);
  CHECK(r.status == 0);
  CHECK(test::count_of(r.output, "learner.cuda_graph = true, training eagerly: the learner trains on the CPU") == 1);
  CHECK(test::count_of(r.output, "actor.cuda_graph = true, evaluating eagerly: the actor evaluates on the CPU") == 1);
  CHECK(r.output.find("finished at step 60") != std::string::npos);
}

TEST_CASE("tandem bench graph without a GPU fails with one line saying it needs one" * doctest::timeout(60)) {
  // Hidden GPUs: on the GPU machine too this checks the refusal rather than running the benchmark.
  const auto r = test::run_command(fmt::format("CUDA_VISIBLE_DEVICES= {} bench graph 2>&1", test::tandem_binary()));
  INFO(r.output);
  CHECK(r.status >= 1);
  CHECK(r.status <= 125);
  CHECK(test::count_of(r.output, "\n") <= 1);
  CHECK(r.output.find("needs a CUDA GPU") != std::string::npos);
}
