// cuDNN's graph (backend) API, for the operations ATen's convolutions do not expose: a descriptor
// that destroys itself, the operation graphs Tandem builds, and the execution plans cuDNN's
// heuristics offer for them. Torch-free: cudnn_conv.hpp is the LibTorch-facing side (tensors, the
// plan cache, the workspace, timing the candidates).
//
//   std::shared_ptr<const Graph> graph = conv_dgrad_graph(handle, shape, /*beta=*/1.0f);
//   std::vector<Plan> plans = candidate_plans(handle, graph, 8);   // best first, per the heuristics
//   plans[0].execute(handle, {{kDy, dy}, {kW, w}, {kDx, dx}}, workspace);
//
// Built where python3's torch ships cuDNN (TANDEM_HAVE_CUDNN); every call throws a UserError
// naming what failed. Threads: descriptors and plans are not shared between threads while being
// built; a finalized Plan may be executed from any thread with that thread's handle.
#pragma once

#include <cudnn.h>

#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <utility>
#include <vector>

namespace tandem::cudnn_graph {

class Descriptor {
 public:
  explicit Descriptor(cudnnBackendDescriptorType_t type);
  Descriptor(Descriptor&& other) noexcept : d_(std::exchange(other.d_, nullptr)) {}
  Descriptor& operator=(Descriptor&& other) noexcept;
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  ~Descriptor();

  cudnnBackendDescriptor_t get() const { return d_; }
  Descriptor& set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, std::int64_t count,
                  const void* values);
  Descriptor& finalize();
  bool try_finalize();  // false where cuDNN refuses (an engine config this graph cannot run)

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
};

// A 2-D convolution with dilation 1 and one group, its tensors channels-last (NHWC in memory),
// dimensions in cuDNN's logical order: x [N, C, H, W], w [K, C, R, S], y [N, K, P, Q].
struct ConvShape {
  cudnnDataType_t type = CUDNN_DATA_FLOAT;  // of x, w and y; the math is float32 (TF32 where cuDNN picks it)
  std::array<std::int64_t, 4> x{}, w{}, y{};
  std::array<std::int64_t, 2> stride{1, 1}, padding{0, 0};
  std::int64_t alignment = 16;  // bytes every data pointer is aligned to
  friend bool operator==(const ConvShape&, const ConvShape&) = default;
};

// The unique ids the variant pack names the tensors by: a convolution's three, and the per-channel
// tensors of the BatchNorm-fused graphs tandem-cudnn-fusion measures (bench/cudnn_fusion.cpp).
enum Uid : std::int64_t { kX = 1, kW = 2, kY = 3, kSum = 4, kSqsum = 5, kScale = 6, kBias = 7 };

// A tensor of logical [N, C, H, W] dimensions, channels-last in memory; a virtual one lives only
// inside a fused kernel (no pointer in the variant pack).
Descriptor nhwc_tensor(std::int64_t uid, cudnnDataType_t type, const std::array<std::int64_t, 4>& dims,
                       bool is_virtual = false, std::int64_t alignment = 16);
// shape's convolution descriptor (float32 math, cross-correlation).
Descriptor convolution(const ConvShape& shape);

// A finalized operation graph and the descriptors it was built from, which it refers to and which
// live as long as it does (as the plans made from it do).
struct Graph {
  Descriptor graph{CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR};
  std::vector<Descriptor> parts;
};

// dx = dgrad(dy, w) + beta * dx: the data gradient of shape's convolution, blended into what dx
// holds (ATen's convolutions always overwrite). Tensors: kY = dy, kW = w, kX = dx.
std::shared_ptr<const Graph> conv_dgrad_graph(cudnnHandle_t handle, const ConvShape& shape, float beta);

class Plan {
 public:
  Plan(std::shared_ptr<const Graph> graph, Descriptor config, Descriptor plan);
  std::int64_t workspace_bytes() const { return workspace_bytes_; }
  void execute(cudnnHandle_t handle, std::initializer_list<std::pair<Uid, void*>> tensors, void* workspace) const;

 private:
  std::shared_ptr<const Graph> graph_;
  Descriptor config_, plan_;
  std::int64_t workspace_bytes_ = 0;
};

// The execution plans for `graph` of the first `max` engine configurations cuDNN's heuristics
// (mode A, then the fallback list if A offers none) rank, best first; configurations that do not
// finalize are left out. Empty: nothing in this cuDNN runs the graph.
std::vector<Plan> candidate_plans(cudnnHandle_t handle, const std::shared_ptr<const Graph>& graph, int max);

}  // namespace tandem::cudnn_graph
