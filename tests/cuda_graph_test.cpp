// GPU: training steps and evaluation replayed from CUDA graphs (learner/captured_train_step.hpp,
// actor/graph_eval.hpp: fused BatchNorm, fused optimizer, folded evaluation) against the eager ones
// with ATen's unfused ops. Without a GPU this binary prints SKIP and exits 77.
#include <torch/torch.h>
// After LibTorch: Debian's c10 pulls in glog, whose CHECK must not replace doctest's.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "actor/evaluator.hpp"
#include "common/torch/builtin_nets/bn_act.hpp"
#include "common/torch/flat_params.hpp"
#include "common/torch/models.hpp"
#include "learner/feed/device_feed.hpp"
#include "learner/feed/synthetic_dataset.hpp"
#include "learner/captured_train_step.hpp"
#include "learner/trainer.hpp"
#include "shm/dataset_cache.hpp"
#include "shm/segment.hpp"
#include "tests/harness.hpp"
#include "tests/tensor_compare.hpp"

#ifdef TANDEM_TORCH_CUDA
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

TANDEM_GPU_TEST_BINARY();

using namespace tandem;
using testing::kGpu;
using testing::relative_l2;

namespace {

// A CIFAR-format cache (uint8 3x32x32, int64 labels) of random samples, removed at scope exit.
struct CifarCache {
  std::string name = test::unique_name("graphcifar");
  explicit CifarCache(std::uint64_t n) {
    shm::DatasetSpec spec{.name = name,
                          .source = "test",
                          .format = "synthetic",
                          .num_samples = n,
                          .fields = {{"x", shm::DType::u8, {3, 32, 32}}, {"y", shm::DType::i64, {}}},
                          .splits = {{"test", 0, n}}};
    shm::DatasetWriter w = shm::DatasetWriter::create(spec, false);
    torch::manual_seed(5);
    const auto count = static_cast<std::int64_t>(n);
    torch::Tensor xs = torch::randint(256, {count, 3, 32, 32}, torch::kUInt8);
    torch::Tensor ys = torch::randint(10, {count}, torch::kInt64);
    std::memcpy(w.field_data(0), xs.data_ptr(), static_cast<std::size_t>(xs.numel()));
    std::memcpy(w.field_data(1), ys.data_ptr(), static_cast<std::size_t>(ys.numel()) * 8);
    w.commit(0, 1);
  }
  ~CifarCache() { shm::Segment::unlink(shm::dataset_segment_name(name)); }
};

Model cifar_model(const std::string& name, torch::ScalarType precision = torch::kFloat32) {
  Model m = Model::create({.name = name, .channels = 3, .height = 32, .width = 32, .num_classes = 10, .seed = 3});
  m.to(kGpu);
  m.set_precision(precision);
  return m;
}

// The reference: ATen's BatchNorm, add and ReLU instead of the fused kernels, for one scope.
struct UnfusedLayers {
  UnfusedLayers() { bn_act_allow_fused(false); }
  ~UnfusedLayers() { bn_act_allow_fused(true); }
};

TrainerConfig sgd(double lr, const ScheduleConfig& schedule) {
  TrainerConfig c;
  c.optimizer = {.kind = "sgd", .lr = lr, .momentum = 0.9, .nesterov = true, .weight_decay = 5e-4};
  c.schedule = schedule;
  return c;
}

// Trains `steps` steps on batches gathered from a fixed GPU pool in a fixed order, eagerly or
// through a CapturedTrainStep; returns the final flat parameters and the last step's lr per step.
struct Trained {
  torch::Tensor params;
  std::vector<double> lrs;
  bool captured = false;
};
// eager_unfused: eager steps with ATen's BatchNorm, add and ReLU and the unfused optimizer (the
// reference); copies: HostFeed's batches copied into the graph's. `perturb`: the initial weights get
// noise of that relative size, to measure how far training amplifies a rounding-sized difference.
enum class Mode { eager, eager_unfused, graph_gathers, graph_copies };
struct Run {
  int steps = 100;
  std::int64_t batch = 128;
  torch::ScalarType precision = torch::kFloat32;
  double perturb = 0;
};
Trained train(const std::string& name, Mode mode, const TrainerConfig& base, const Run& run) {
  const int steps = run.steps;
  const std::int64_t batch = run.batch;
  std::optional<UnfusedLayers> unfused;
  TrainerConfig config = base;
  if (mode == Mode::eager_unfused) {
    unfused.emplace();
    config.optimizer.fused = false;
  }
  Model m = cifar_model(name, run.precision);
  if (run.perturb > 0) {
    torch::NoGradGuard no_grad;
    torch::manual_seed(21);
    for (auto& [n, p] : m.named_parameters()) p.add_(torch::randn_like(p) * p.abs().mean() * run.perturb);
  }
  FlatParams flat = FlatParams::flatten(m);
  Trainer t(m, config);
  torch::manual_seed(11);
  const torch::Tensor pool_x = torch::randn({batch * 4, 3, 32, 32}).to(kGpu);
  const torch::Tensor pool_y = torch::randint(10, {batch * 4}, torch::kInt64).to(kGpu);
  const torch::Tensor order = torch::randint(batch * 4, {steps, batch}, torch::kInt64).to(kGpu);
  auto gather = [&](const torch::Tensor& rows, feed::Batch& out) {
    torch::index_select_out(out.x, pool_x, 0, rows);
    torch::index_select_out(out.y, pool_y, 0, rows);
  };
  Trained out;
  feed::Batch b{torch::empty({batch, 3, 32, 32}, pool_x.options()), torch::empty({batch}, pool_y.options())};
  if (mode == Mode::graph_gathers) {
    REQUIRE_FALSE(CapturedTrainStep::unsupported(t).has_value());
    CapturedTrainStep g(t, {batch, 3, 32, 32}, gather);
    for (int s = 0; s < steps; ++s) {
      g.rows().copy_(order[s]);
      out.lrs.push_back(g.step().lr);
    }
    out.captured = g.captured();
  } else if (mode == Mode::graph_copies) {
    CapturedTrainStep g(t, {batch, 3, 32, 32});
    for (int s = 0; s < steps; ++s) {
      gather(order[s], b);
      out.lrs.push_back(g.step(b.x, b.y).lr);
    }
    out.captured = g.captured();
  } else {
    for (int s = 0; s < steps; ++s) {
      gather(order[s], b);
      out.lrs.push_back(t.train_step(b.x, b.y).lr);
    }
  }
  CHECK(t.step() == steps);
  // Parameters and buffers (BatchNorm statistics too), as float32.
  out.params = flat.buffer().narrow(0, 0, static_cast<std::int64_t>(flat.float32_bytes())).view(torch::kFloat).clone();
  return out;
}

}  // namespace

// Evaluates `name` eagerly and through the graph, before and after new weights are copied in place
// (as the follower does: the same graphs replay them, the fold refreshed by evaluate()).
void compare_evaluation(const std::string& name, const shm::DatasetCache& attached, double loss_tolerance,
                        double accuracy_tolerance) {
  CAPTURE(name);
  Model m = cifar_model(name);
  const EvalConfig base{.batch_size = 128, .mean = {0.5, 0.5, 0.5}, .std = {0.25, 0.25, 0.25}, .device = kGpu};
  EvalConfig with_graph = base;
  with_graph.cuda_graph = true;
  const Evaluator eager(attached, base), graphed(attached, with_graph);
  const EvalResult a = eager.evaluate(m);
  const EvalResult b = graphed.evaluate(m);
  CHECK(graphed.graph_active());
  CHECK(a.samples == 500);
  CHECK(b.samples == a.samples);
  CHECK(std::abs(b.loss - a.loss) <= loss_tolerance * a.loss);
  CHECK(std::abs(b.accuracy - a.accuracy) <= accuracy_tolerance);
  {  // a new version in place: outputs move well beyond the tolerance
    torch::NoGradGuard no_grad;
    torch::manual_seed(8);
    for (auto& [n, p] : m.named_parameters()) p.add_(torch::randn_like(p) * p.std() * 2);
  }
  const EvalResult a2 = eager.evaluate(m), b2 = graphed.evaluate(m);
  CHECK(std::abs(b2.loss - a2.loss) <= loss_tolerance * a2.loss);
  CHECK(std::abs(b2.accuracy - a2.accuracy) <= accuracy_tolerance);
  CHECK(std::abs(a2.loss - a.loss) > 10 * loss_tolerance * a.loss);
}

TEST_CASE("evaluation with a captured graph: folded networks within 1e-3 of eager, others bitwise" *
          doctest::timeout(240)) {
  REQUIRE(torch::cuda::is_available());
  const CifarCache cache(500);  // batch 128: three full batches replayed, the last 116 eager
  const shm::DatasetCache attached = shm::DatasetCache::attach(cache.name);
  compare_evaluation("mlp", attached, 0.0, 0.0);  // nothing to fold: the same kernels, the same sums
  // Folded: another order of float32 (TF32 convolution) sums; a prediction at a near tie may flip.
  compare_evaluation("cnn", attached, 1e-3, 0.01);
  compare_evaluation("resnet18", attached, 1e-3, 0.01);
}

// cuDNN's default algorithms add with atomics in some backward kernels: two eager runs then drift apart
// by 1-3 % over 100 steps, which would hide any difference a graph made. Deterministic algorithms
// make eager reproduce itself, so the comparison measures the graph alone.
void deterministic_cudnn() {
  at::globalContext().setBenchmarkCuDNN(false);
  at::globalContext().setDeterministicCuDNN(true);
}

TEST_CASE("the captured step trains exactly as the eager step: the same fused kernels" * doctest::timeout(300)) {
  REQUIRE(torch::cuda::is_available());
  deterministic_cudnn();
  const TrainerConfig config = sgd(0.01, {.kind = "cosine", .warmup_steps = 10, .total_steps = 100});
  for (const std::string name : {"cnn", "resnet18"})
    for (const torch::ScalarType precision : {torch::kFloat32, torch::kBFloat16}) {
      CAPTURE(name);
      const std::string type = c10::toString(precision);
      CAPTURE(type);
      const Trained eager = train(name, Mode::eager, config, {.precision = precision});
      const Trained graph = train(name, Mode::graph_gathers, config, {.precision = precision});
      const Trained copied = train(name, Mode::graph_copies, config, {.precision = precision});
      CHECK(graph.captured);
      CHECK(copied.captured);
      const double diff = relative_l2(graph.params, eager.params),
                   copied_diff = relative_l2(copied.params, eager.params);
      INFO("graph vs eager ", diff, " (batches copied in: ", copied_diff, ")");
      CHECK(diff < 1e-5);
      CHECK(copied_diff < 1e-5);
    }
}

// The fused layers and optimizer compute the same function as ATen's in another order, and training
// amplifies any difference in the last bits (cuDNN's atomics alone make runs drift 1-3 % apart over
// 100 steps). The measure of "rounding only": the distance to the reference after one step (the
// update itself), and after 100 steps against how far the reference drifts from itself when its
// initial weights get 1e-6 relative noise. bf16 training, which rounds every activation, must stay
// near float32's: within 10 %, a fifth of how far training moved the weights.
TEST_CASE("training with the fused, captured step stays within rounding of ATen's eager one, bf16 near it" *
          doctest::timeout(300)) {
  REQUIRE(torch::cuda::is_available());
  deterministic_cudnn();
  const TrainerConfig config = sgd(0.01, {.kind = "cosine", .warmup_steps = 10, .total_steps = 100});
  for (const std::string name : {"cnn", "resnet18"}) {
    CAPTURE(name);
    const Trained init = train(name, Mode::eager, config, {.steps = 0});
    const Trained ref1 = train(name, Mode::eager_unfused, config, {.steps = 1});
    const Trained graph1 = train(name, Mode::graph_gathers, config, {.steps = 1});
    const double first_update = relative_l2(graph1.params - init.params, ref1.params - init.params);
    const Trained ref = train(name, Mode::eager_unfused, config, {});
    const Trained again = train(name, Mode::eager_unfused, config, {});
    const Trained nudged = train(name, Mode::eager_unfused, config, {.perturb = 1e-6});
    const Trained graph = train(name, Mode::graph_gathers, config, {});
    const double noise = relative_l2(again.params, ref.params), drift = relative_l2(nudged.params, ref.params);
    const double diff = relative_l2(graph.params, ref.params), moved = relative_l2(init.params, ref.params);
    INFO("first update vs reference's ", first_update, "; after 100 steps: graph vs reference ", diff,
         ", reference vs itself ", noise, ", with 1e-6 initial noise ", drift, ", training moved ", moved);
    CHECK(noise < 1e-6);
    CHECK(first_update < 1e-3);
    CHECK(diff < std::max(3 * drift, 1e-3));
    CHECK(moved > 10 * diff);

    const Trained bf16 = train(name, Mode::graph_gathers, config, {.precision = torch::kBFloat16});
    CHECK(bf16.captured);
    const double to_f32 = relative_l2(bf16.params, ref.params);
    INFO("bf16 graph vs float32 reference ", to_f32);
    CHECK(to_f32 < 0.1);
    CHECK(moved > 5 * to_f32);
  }
}

TEST_CASE("the captured step follows the learning-rate schedule" * doctest::timeout(240)) {
  REQUIRE(torch::cuda::is_available());
  // Warmup then cosine: lr changes at every replay; a graph that baked in its capture-time lr
  // would train differently from eager.
  deterministic_cudnn();
  const ScheduleConfig schedule{.kind = "cosine", .warmup_steps = 10, .total_steps = 30};
  const TrainerConfig config = sgd(0.05, schedule);
  const Trained eager = train("cnn", Mode::eager, config, {.steps = 30, .batch = 64});
  const Trained graph = train("cnn", Mode::graph_gathers, config, {.steps = 30, .batch = 64});
  CHECK(graph.captured);
  REQUIRE(graph.lrs.size() == 30);
  for (int s = 0; s < 30; ++s) CHECK(graph.lrs[static_cast<std::size_t>(s)] == scheduled_lr(schedule, 0.05, s));
  const Trained constant = train("cnn", Mode::graph_gathers, sgd(0.05, {.kind = "constant"}),
                                 {.steps = 30, .batch = 64});
  const double followed = relative_l2(graph.params, eager.params);
  const double ignored = relative_l2(constant.params, eager.params);  // what a frozen lr would look like
  INFO("graph vs eager ", followed, ", constant lr vs eager ", ignored);
  CHECK(followed < 1e-5);
  CHECK(ignored > 10 * std::max(followed, 1e-5));
}

#ifdef TANDEM_TORCH_CUDA
TEST_CASE("DeviceFeed's rows copy and captured gather give next()'s batches, across epochs") {
  REQUIRE(torch::cuda::is_available());
  const feed::SyntheticDataset data(test::unique_name("graphfeed"), 1000, 100, {3, 8, 8});
  const shm::DatasetCache cache = shm::DatasetCache::attach(data.name());
  feed::FeedOptions o;
  o.placement = feed::Placement::cuda;
  o.batch_size = 64;  // 15 full steps per epoch: 40 steps cross two epoch boundaries
  o.drop_last = true;
  o.seed = 3;
  o.mean = {0.4f, 0.5f, 0.6f};
  o.stddev = {0.2f, 0.3f, 0.4f};
  feed::DeviceFeed eager(cache, o), graphed(cache, o);
  const auto gpu = torch::TensorOptions().device(kGpu);
  const torch::Tensor rows = torch::zeros({64}, gpu.dtype(torch::kInt64));
  feed::Batch fixed{torch::zeros({64, 3, 8, 8}, gpu.dtype(torch::kFloat)),
                    torch::zeros({64}, gpu.dtype(torch::kInt64))};
  at::cuda::CUDAGraph graph;
  {
    const c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool(false, 0);
    torch::cuda::synchronize();
    c10::cuda::CUDAStreamGuard on_side(side);
    graphed.gather(rows, fixed);  // warm-up
    graph.capture_begin({0, 0}, cudaStreamCaptureModeThreadLocal);
    graphed.gather(rows, fixed);
    graph.capture_end();
    torch::cuda::synchronize();
  }
  for (int i = 0; i < 40; ++i) {
    CAPTURE(i);
    const feed::Step want = eager.next();
    const feed::Step got = graphed.next_rows(rows);
    CHECK(got.epoch == want.epoch);
    CHECK(got.index == want.index);
    CHECK(got.batches.empty());
    graph.replay();
    CHECK(torch::equal(fixed.y, want.batches[0].y));
    CHECK(torch::equal(fixed.x, want.batches[0].x));  // the same kernel: bitwise
  }
}
#endif
