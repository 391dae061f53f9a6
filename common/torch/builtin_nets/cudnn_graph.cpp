#include "common/torch/builtin_nets/cudnn_graph.hpp"

#include <algorithm>

#include "common/error.hpp"

// cuDNN 9 marks the handle attributes deprecated in favour of a device-properties descriptor; the
// handle still works, and is what older cuDNN 9 releases (the one a torch wheel ships) take.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

namespace tandem::cudnn_graph {
namespace {

void check(cudnnStatus_t status, const char* call) {
  if (status != CUDNN_STATUS_SUCCESS) fail("cuDNN {} failed: {}", call, cudnnGetErrorString(status));
}

// Channels-last strides of logical [N, C, H, W] dimensions.
std::array<std::int64_t, 4> nhwc_strides(const std::array<std::int64_t, 4>& d) {
  return {d[1] * d[2] * d[3], 1, d[3] * d[1], d[1]};
}

Descriptor tensor(Uid uid, const ConvShape& shape, const std::array<std::int64_t, 4>& dims) {
  return nhwc_tensor(uid, shape.type, dims, false, shape.alignment);
}

// The engine configurations heuristics `mode` ranks for `graph`, at most `max`.
std::vector<Descriptor> engine_configs(const Descriptor& graph, cudnnBackendHeurMode_t mode, int max) {
  Descriptor heuristics(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  const cudnnBackendDescriptor_t g = graph.get();
  heuristics.set(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g)
      .set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
  if (!heuristics.try_finalize()) return {};
  std::int64_t available = 0;
  check(cudnnBackendGetAttribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0,
                                 &available, nullptr),
        "cudnnBackendGetAttribute(ENGINEHEUR_RESULTS)");
  std::vector<Descriptor> configs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (std::int64_t i = 0; i < std::min<std::int64_t>(available, max); ++i) {
    configs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    raw.push_back(configs.back().get());
  }
  std::int64_t got = 0;
  check(cudnnBackendGetAttribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                 static_cast<std::int64_t>(raw.size()), &got, raw.data()),
        "cudnnBackendGetAttribute(ENGINEHEUR_RESULTS)");
  while (static_cast<std::int64_t>(configs.size()) > got) configs.pop_back();
  return configs;
}

}  // namespace

Descriptor::Descriptor(cudnnBackendDescriptorType_t type) {
  check(cudnnBackendCreateDescriptor(type, &d_), "cudnnBackendCreateDescriptor");
}

Descriptor& Descriptor::operator=(Descriptor&& other) noexcept {
  if (this != &other) {
    if (d_ != nullptr) cudnnBackendDestroyDescriptor(d_);
    d_ = std::exchange(other.d_, nullptr);
  }
  return *this;
}

Descriptor::~Descriptor() {
  if (d_ != nullptr) cudnnBackendDestroyDescriptor(d_);
}

Descriptor& Descriptor::set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, std::int64_t count,
                            const void* values) {
  const cudnnStatus_t status = cudnnBackendSetAttribute(d_, name, type, count, values);
  if (status != CUDNN_STATUS_SUCCESS)
    fail("cuDNN cudnnBackendSetAttribute(attribute {}) failed: {}", static_cast<int>(name),
         cudnnGetErrorString(status));
  return *this;
}

Descriptor& Descriptor::finalize() {
  check(cudnnBackendFinalize(d_), "cudnnBackendFinalize");
  return *this;
}

bool Descriptor::try_finalize() { return cudnnBackendFinalize(d_) == CUDNN_STATUS_SUCCESS; }

Descriptor nhwc_tensor(std::int64_t uid, cudnnDataType_t type, const std::array<std::int64_t, 4>& dims, bool is_virtual,
                       std::int64_t alignment) {
  const std::array<std::int64_t, 4> strides = nhwc_strides(dims);
  Descriptor t(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  t.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type)
      .set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims.data())
      .set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides.data())
      .set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid)
      .set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment)
      .set(CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual);
  return std::move(t.finalize());
}

Descriptor convolution(const ConvShape& shape) {
  const cudnnDataType_t math = CUDNN_DATA_FLOAT;
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  const std::int64_t dims = 2;
  const std::array<std::int64_t, 2> dilation{1, 1};
  Descriptor c(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  c.set(CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &math)
      .set(CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode)
      .set(CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &dims)
      .set(CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, dilation.data())
      .set(CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, shape.stride.data())
      .set(CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, shape.padding.data())
      .set(CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, shape.padding.data());
  return std::move(c.finalize());
}

std::shared_ptr<const Graph> conv_dgrad_graph(cudnnHandle_t handle, const ConvShape& shape, float beta) {
  auto g = std::make_shared<Graph>();
  g->parts.push_back(tensor(kX, shape, shape.x));
  g->parts.push_back(tensor(kW, shape, shape.w));
  g->parts.push_back(tensor(kY, shape, shape.y));
  g->parts.push_back(convolution(shape));
  const float alpha = 1.0f;
  const cudnnBackendDescriptor_t dx = g->parts[0].get(), w = g->parts[1].get(), dy = g->parts[2].get(),
                                 conv = g->parts[3].get();
  Descriptor op(CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR);
  op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha)
      .set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA, CUDNN_TYPE_FLOAT, 1, &beta)
      .set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &conv)
      .set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &w)
      .set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &dx)
      .set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &dy)
      .finalize();
  const cudnnBackendDescriptor_t o = op.get();
  g->parts.push_back(std::move(op));
  g->graph.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &o)
      .set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle)
      .finalize();
  return g;
}

Plan::Plan(std::shared_ptr<const Graph> graph, Descriptor config, Descriptor plan)
    : graph_(std::move(graph)), config_(std::move(config)), plan_(std::move(plan)) {
  std::int64_t count = 0;
  check(cudnnBackendGetAttribute(plan_.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &count,
                                 &workspace_bytes_),
        "cudnnBackendGetAttribute(EXECUTION_PLAN_WORKSPACE_SIZE)");
}

void Plan::execute(cudnnHandle_t handle, std::initializer_list<std::pair<Uid, void*>> tensors, void* workspace) const {
  std::vector<std::int64_t> uids;
  std::vector<void*> pointers;
  for (const auto& [uid, pointer] : tensors) {
    uids.push_back(uid);
    pointers.push_back(pointer);
  }
  Descriptor pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, static_cast<std::int64_t>(uids.size()), uids.data())
      .set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, static_cast<std::int64_t>(pointers.size()),
           pointers.data())
      .set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace)
      .finalize();
  check(cudnnBackendExecute(handle, plan_.get(), pack.get()), "cudnnBackendExecute");
}

std::vector<Plan> candidate_plans(cudnnHandle_t handle, const std::shared_ptr<const Graph>& graph, int max) {
  std::vector<Descriptor> configs = engine_configs(graph->graph, CUDNN_HEUR_MODE_A, max);
  if (configs.empty()) configs = engine_configs(graph->graph, CUDNN_HEUR_MODE_FALLBACK, max);
  std::vector<Plan> plans;
  for (Descriptor& config : configs) {
    const cudnnBackendDescriptor_t c = config.get();
    Descriptor plan(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
    plan.set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle)
        .set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c);
    if (plan.try_finalize()) plans.emplace_back(graph, std::move(config), std::move(plan));
  }
  return plans;
}

}  // namespace tandem::cudnn_graph
