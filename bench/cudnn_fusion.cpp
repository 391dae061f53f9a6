// tandem-cudnn-fusion: can cuDNN put a BatchNorm's work inside a convolution without slowing the
// convolution down? The ResNet-18 training targets at batch 512 need that (docs/DEPARTURES.md): the
// unfused BatchNorms alone take much of a step. For each ResNet-18 (CIFAR) 3x3 convolution shape,
// at each batch and precision, it times the best plan cuDNN's heuristics offer for three graphs:
//   conv                y = conv(x, w)
//   conv+stats          the same, and the per-channel sum and sum of squares of y (BatchNorm's
//                       statistics, in the convolution's epilogue)
//   scale-bias-relu+conv+stats   as conv+stats on relu(x * scale + bias) (the previous BatchNorm's
//                       normalisation and ReLU, in the convolution's prologue)
// --all-engines also runs every engine cuDNN has for the layer-1 shape at batch 512, default knobs,
// in case the heuristics leave a fused one out. Torch-free: cuDNN's graph API (cudnn_graph.hpp),
// the CUDA runtime, inputs of zeros (the kernels' speed does not depend on the values).
//
//   tandem-cudnn-fusion [--batches 128,512] [--plans 5] [--all-engines]
#include <CLI/CLI.hpp>
#include <cuda_runtime.h>
#include <fmt/core.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "common/torch/builtin_nets/cudnn_graph.hpp"

namespace tandem {
namespace {

namespace graph = cudnn_graph;
using Dims = std::array<std::int64_t, 4>;

void check_cuda(cudaError_t status, const char* call) {
  if (status != cudaSuccess) fail("tandem-cudnn-fusion: {} failed: {}", call, cudaGetErrorString(status));
}

struct DeviceBuffer {
  explicit DeviceBuffer(std::size_t bytes) {
    check_cuda(cudaMalloc(&p, bytes), "cudaMalloc");
    check_cuda(cudaMemset(p, 0, bytes), "cudaMemset");
  }
  ~DeviceBuffer() { cudaFree(p); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* p = nullptr;
};

enum class Fusion { none, stats, prologue_stats };
constexpr const char* kFusionNames[] = {"conv", "conv+stats", "scale-bias-relu+conv+stats"};
constexpr int kColumnWidths[] = {10, 12, 28};

Dims per_channel(std::int64_t c) { return {1, c, 1, 1}; }

// y = op(x[, b]) for a pointwise mode; the pointwise descriptor becomes one of g's parts.
graph::Descriptor pointwise(graph::Graph& g, cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x,
                            cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t y) {
  const cudnnDataType_t math = CUDNN_DATA_FLOAT;
  graph::Descriptor pw(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
  pw.set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode)
      .set(CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &math)
      .finalize();
  const cudnnBackendDescriptor_t p = pw.get();
  g.parts.push_back(std::move(pw));
  graph::Descriptor op(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
  op.set(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &p)
      .set(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
  if (b != nullptr) op.set(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b);
  op.set(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y).finalize();
  return op;
}

// Adds a descriptor to g's parts, which live as long as the graph, and returns its cuDNN handle.
cudnnBackendDescriptor_t keep(graph::Graph& g, graph::Descriptor d) {
  g.parts.push_back(std::move(d));
  return g.parts.back().get();
}

std::shared_ptr<const graph::Graph> fused_conv_graph(cudnnHandle_t handle, const graph::ConvShape& s, Fusion f) {
  auto g = std::make_shared<graph::Graph>();
  const std::int64_t c = s.x[1], k = s.w[0];
  std::vector<cudnnBackendDescriptor_t> ops;
  cudnnBackendDescriptor_t x = keep(*g, graph::nhwc_tensor(graph::kX, s.type, s.x));
  const cudnnBackendDescriptor_t w = keep(*g, graph::nhwc_tensor(graph::kW, s.type, s.w));
  const cudnnBackendDescriptor_t y = keep(*g, graph::nhwc_tensor(graph::kY, s.type, s.y));
  if (f == Fusion::prologue_stats) {
    const cudnnBackendDescriptor_t scale = keep(*g,
                                                graph::nhwc_tensor(graph::kScale, CUDNN_DATA_FLOAT, per_channel(c)));
    const cudnnBackendDescriptor_t bias = keep(*g, graph::nhwc_tensor(graph::kBias, CUDNN_DATA_FLOAT, per_channel(c)));
    const cudnnBackendDescriptor_t scaled = keep(*g, graph::nhwc_tensor(100, CUDNN_DATA_FLOAT, s.x, true));
    const cudnnBackendDescriptor_t shifted = keep(*g, graph::nhwc_tensor(101, CUDNN_DATA_FLOAT, s.x, true));
    const cudnnBackendDescriptor_t relu = keep(*g, graph::nhwc_tensor(102, s.type, s.x, true));
    ops.push_back(keep(*g, pointwise(*g, CUDNN_POINTWISE_MUL, x, scale, scaled)));
    ops.push_back(keep(*g, pointwise(*g, CUDNN_POINTWISE_ADD, scaled, bias, shifted)));
    ops.push_back(keep(*g, pointwise(*g, CUDNN_POINTWISE_RELU_FWD, shifted, nullptr, relu)));
    x = relu;
  }
  const cudnnBackendDescriptor_t conv = keep(*g, graph::convolution(s));
  const float alpha = 1.0f, beta = 0.0f;
  graph::Descriptor fprop(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR);
  fprop.set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha)
      .set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, 1, &beta)
      .set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &conv)
      .set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &w)
      .set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x)
      .set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y)
      .finalize();
  ops.push_back(keep(*g, std::move(fprop)));
  if (f != Fusion::none) {
    const cudnnBackendDescriptor_t sum = keep(*g, graph::nhwc_tensor(graph::kSum, CUDNN_DATA_FLOAT, per_channel(k)));
    const cudnnBackendDescriptor_t sqsum = keep(*g,
                                                graph::nhwc_tensor(graph::kSqsum, CUDNN_DATA_FLOAT, per_channel(k)));
    const cudnnGenStatsMode_t mode = CUDNN_GENSTATS_SUM_SQSUM;
    const cudnnDataType_t math = CUDNN_DATA_FLOAT;
    graph::Descriptor stats(CUDNN_BACKEND_OPERATION_GEN_STATS_DESCRIPTOR);
    stats.set(CUDNN_ATTR_OPERATION_GENSTATS_MODE, CUDNN_TYPE_GENSTATS_MODE, 1, &mode)
        .set(CUDNN_ATTR_OPERATION_GENSTATS_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &math)
        .set(CUDNN_ATTR_OPERATION_GENSTATS_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y)
        .set(CUDNN_ATTR_OPERATION_GENSTATS_SUMDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &sum)
        .set(CUDNN_ATTR_OPERATION_GENSTATS_SQSUMDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &sqsum)
        .finalize();
    ops.push_back(keep(*g, std::move(stats)));
  }
  g->graph
      .set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, static_cast<std::int64_t>(ops.size()),
           ops.data())
      .set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle)
      .finalize();
  return g;
}

// Every engine cuDNN has for the graph, each with its default knobs, as plans (those that finalize).
std::vector<graph::Plan> every_engine(cudnnHandle_t handle, const std::shared_ptr<const graph::Graph>& g) {
  std::int64_t engines = 0, got = 0;
  if (cudnnBackendGetAttribute(g->graph.get(), CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT, CUDNN_TYPE_INT64, 1, &got,
                               &engines) != CUDNN_STATUS_SUCCESS)
    fail("tandem-cudnn-fusion: cuDNN would not count the graph's engines");
  std::vector<graph::Plan> plans;
  for (std::int64_t i = 0; i < engines; ++i) {
    graph::Descriptor engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
    const cudnnBackendDescriptor_t og = g->graph.get();
    engine.set(CUDNN_ATTR_ENGINE_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &og)
        .set(CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &i);
    if (!engine.try_finalize()) continue;
    graph::Descriptor config(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    const cudnnBackendDescriptor_t e = engine.get();
    config.set(CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &e);
    if (!config.try_finalize()) continue;
    const cudnnBackendDescriptor_t c = config.get();
    graph::Descriptor plan(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
    plan.set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle)
        .set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c);
    if (plan.try_finalize()) plans.emplace_back(g, std::move(config), std::move(plan));
  }
  return plans;
}

struct Buffers {
  DeviceBuffer x, w, y, sum, sqsum, scale, bias, workspace;
  static constexpr std::size_t kWorkspace = std::size_t{1} << 30;
};

// Milliseconds per run of the plan (the mean of 20 after 3 warm-ups); none where it does not run.
std::optional<float> time_plan(cudnnHandle_t handle, const graph::Plan& plan, Fusion f, Buffers& b) {
  if (static_cast<std::size_t>(plan.workspace_bytes()) > Buffers::kWorkspace) return std::nullopt;
  const auto run = [&] {
    if (f == Fusion::none)
      plan.execute(handle, {{graph::kX, b.x.p}, {graph::kW, b.w.p}, {graph::kY, b.y.p}}, b.workspace.p);
    else if (f == Fusion::stats)
      plan.execute(handle,
                   {{graph::kX, b.x.p},
                    {graph::kW, b.w.p},
                    {graph::kY, b.y.p},
                    {graph::kSum, b.sum.p},
                    {graph::kSqsum, b.sqsum.p}},
                   b.workspace.p);
    else
      plan.execute(handle,
                   {{graph::kX, b.x.p},
                    {graph::kW, b.w.p},
                    {graph::kY, b.y.p},
                    {graph::kSum, b.sum.p},
                    {graph::kSqsum, b.sqsum.p},
                    {graph::kScale, b.scale.p},
                    {graph::kBias, b.bias.p}},
                   b.workspace.p);
  };
  try {
    run();
    check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  } catch (const UserError&) {
    return std::nullopt;
  }
  for (int i = 0; i < 3; ++i) run();
  cudaEvent_t start = nullptr, stop = nullptr;
  check_cuda(cudaEventCreate(&start), "cudaEventCreate");
  check_cuda(cudaEventCreate(&stop), "cudaEventCreate");
  constexpr int kRuns = 20;
  check_cuda(cudaEventRecord(start), "cudaEventRecord");
  for (int i = 0; i < kRuns; ++i) run();
  check_cuda(cudaEventRecord(stop), "cudaEventRecord");
  check_cuda(cudaEventSynchronize(stop), "cudaEventSynchronize");
  float ms = 0.0f;
  check_cuda(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ms / kRuns;
}

struct Best {
  std::size_t ran = 0;
  std::optional<float> ms;
};

Best best_of(cudnnHandle_t handle, const std::vector<graph::Plan>& plans, Fusion f, Buffers& b) {
  Best best;
  for (const graph::Plan& plan : plans) {
    const std::optional<float> ms = time_plan(handle, plan, f, b);
    if (!ms) continue;
    ++best.ran;
    if (!best.ms || *ms < *best.ms) best.ms = ms;
  }
  return best;
}

// ResNet-18's 3x3 convolutions on 32x32 images: in channels, input size, out channels, stride.
struct Layer {
  std::int64_t c, h, k, stride;
};
constexpr Layer kLayers[] = {{64, 32, 64, 1}, {64, 32, 128, 2}, {128, 16, 128, 1}, {256, 8, 256, 1}, {512, 4, 512, 1}};

graph::ConvShape shape_of(const Layer& l, std::int64_t n, cudnnDataType_t type) {
  const std::int64_t p = l.h / l.stride;
  return {.type = type,
          .x = {n, l.c, l.h, l.h},
          .w = {l.k, l.c, 3, 3},
          .y = {n, l.k, p, p},
          .stride = {l.stride, l.stride},
          .padding = {1, 1}};
}

int run(const std::vector<std::int64_t>& batches, int max_plans, bool all_engines) {
  cudnnHandle_t handle = nullptr;
  if (cudnnCreate(&handle) != CUDNN_STATUS_SUCCESS) fail("tandem-cudnn-fusion: no cuDNN handle (is a GPU visible?)");
  std::int64_t largest = 0;
  for (std::int64_t n : batches) largest = std::max(largest, n);
  const std::size_t activation = static_cast<std::size_t>(largest) * 64 * 32 * 32 * 4;
  Buffers b{DeviceBuffer(activation), DeviceBuffer(512 * 512 * 9 * 4),
            DeviceBuffer(activation), DeviceBuffer(4096),
            DeviceBuffer(4096),       DeviceBuffer(4096),
            DeviceBuffer(4096),       DeviceBuffer(Buffers::kWorkspace)};
  fmt::print("cuDNN {}; best plan of the heuristics' first {} (ms per run)\n", cudnnGetVersion(), max_plans);
  fmt::print("{:>5} {:<5} {:>15} {:>10} {:>12} {:>28}\n", "batch", "prec", "in>out /stride", kFusionNames[0],
             kFusionNames[1], kFusionNames[2]);
  for (std::int64_t n : batches)
    for (cudnnDataType_t type : {CUDNN_DATA_FLOAT, CUDNN_DATA_BFLOAT16})
      for (const Layer& l : kLayers) {
        std::string row;
        for (Fusion f : {Fusion::none, Fusion::stats, Fusion::prologue_stats}) {
          const auto g = fused_conv_graph(handle, shape_of(l, n, type), f);
          const Best best = best_of(handle, graph::candidate_plans(handle, g, max_plans), f, b);
          const int width = kColumnWidths[static_cast<int>(f)];
          row += best.ms ? fmt::format(" {:>{}.4f}", *best.ms, width) : fmt::format(" {:>{}}", "none", width);
        }
        fmt::print("{:>5} {:<5} {:>15}{}\n", n, type == CUDNN_DATA_FLOAT ? "fp32" : "bf16",
                   fmt::format("{}>{} /{}", l.c, l.k, l.stride), row);
      }
  if (all_engines)
    for (cudnnDataType_t type : {CUDNN_DATA_FLOAT, CUDNN_DATA_BFLOAT16})
      for (Fusion f : {Fusion::none, Fusion::stats}) {
        const auto g = fused_conv_graph(handle, shape_of(kLayers[0], largest, type), f);
        const std::vector<graph::Plan> plans = every_engine(handle, g);
        const Best best = best_of(handle, plans, f, b);
        fmt::print("every engine, default knobs, {} {} at batch {} (64>64 /1): {} finalize, {} run, best {}\n",
                   kFusionNames[static_cast<int>(f)], type == CUDNN_DATA_FLOAT ? "fp32" : "bf16", largest, plans.size(),
                   best.ran, best.ms ? fmt::format("{:.4f} ms", *best.ms) : std::string("none"));
      }
  cudnnDestroy(handle);
  return 0;
}

}  // namespace
}  // namespace tandem

int main(int argc, char** argv) {
  CLI::App app{"Times cuDNN's convolutions with and without BatchNorm's work fused in (docs/DEPARTURES.md)",
               "tandem-cudnn-fusion"};
  std::vector<std::int64_t> batches{128, 512};
  int plans = 5;
  bool all_engines = false;
  app.add_option("--batches", batches, "batch sizes")->delimiter(',')->check(CLI::PositiveNumber);
  app.add_option("--plans", plans, "how many of the heuristics' plans to time per graph")->check(CLI::Range(1, 100));
  app.add_flag("--all-engines", all_engines, "also run every engine for layer 1 at the largest batch");
  CLI11_PARSE(app, argc, argv);
  try {
    return tandem::run(batches, plans, all_engines);
  } catch (const tandem::UserError& e) {
    fmt::print(stderr, "{}\n", e.what());
    return 1;
  }
}
