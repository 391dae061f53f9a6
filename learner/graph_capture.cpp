#include "learner/graph_capture.hpp"

#include <algorithm>

#include "common/error.hpp"

#ifdef TANDEM_TORCH_CUDA
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

namespace tandem {

std::optional<std::string> GraphCapture::unsupported(torch::Device device) {
  if (!device.is_cuda()) return "the learner trains on the CPU (CUDA graphs need learner.device = \"cuda\")";
#ifndef TANDEM_TORCH_CUDA
  return "this build's LibTorch has no CUDA";
#endif
  return std::nullopt;
}

#ifdef TANDEM_TORCH_CUDA

struct GraphCapture::Impl {
  c10::DeviceIndex device;
  int warmup_left;
  c10::cuda::CUDAStream side;
  std::unique_ptr<at::cuda::CUDAGraph> graph;
  std::string why;  // set once a capture failed

  Impl(torch::Device d, int warmup)
      : device(d.index()), warmup_left(std::max(warmup, 1)), side(c10::cuda::getStreamFromPool(false, d.index())) {}

  static void cuda_wait(const c10::cuda::CUDAStream& first, const c10::cuda::CUDAStream& then) {
    cudaEvent_t e = nullptr;
    C10_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    C10_CUDA_CHECK(cudaEventRecord(e, first.stream()));
    C10_CUDA_CHECK(cudaStreamWaitEvent(then.stream(), e, 0));
    C10_CUDA_CHECK(cudaEventDestroy(e));
  }

  void on_side_stream(const std::function<void()>& fn) {
    const c10::cuda::CUDAStream caller = c10::cuda::getCurrentCUDAStream(device);
    cuda_wait(caller, side);
    {
      c10::cuda::CUDAStreamGuard on_side(side);
      fn();
    }
    cuda_wait(side, caller);
  }

  // Records the body; false (and nothing changed on the device) when capture is refused.
  bool capture(const std::function<void()>& body) {
    auto g = std::make_unique<at::cuda::CUDAGraph>();
    on_side_stream([&] {
      try {
        // Thread-local: the publisher's and feeds' threads keep their CUDA calls during the capture.
        g->capture_begin({0, 0}, cudaStreamCaptureModeThreadLocal);
        try {
          body();
        } catch (...) {
          try {
            g->capture_end();  // ends the capture and the allocator's routing to the graph's pool
          } catch (...) {
          }
          throw;
        }
        g->capture_end();
      } catch (const std::exception& e) {
        why = e.what();
        why = why.substr(0, why.find('\n'));
        if (why.empty()) why = "the capture failed";
      }
    });
    if (!why.empty()) {
      (void)cudaGetLastError();  // a refused capture leaves its error behind; the eager path must not see it
      return false;
    }
    graph = std::move(g);
    return true;
  }

  Ran run(const std::function<void()>& body) {
    if (!why.empty()) return Ran::refused;
    c10::cuda::CUDAGuard guard(device);
    if (warmup_left > 0) {
      --warmup_left;
      on_side_stream(body);
      return Ran::warmup;
    }
    if (!graph && !capture(body)) return Ran::refused;
    graph->replay();
    return Ran::replayed;
  }
};

GraphCapture::GraphCapture(torch::Device device, int warmup_steps) {
  if (auto why = unsupported(device)) fail("a captured step is not possible here: {}", *why);
  impl_ = std::make_unique<Impl>(device, warmup_steps);
}
GraphCapture::Ran GraphCapture::run(const std::function<void()>& body) { return impl_->run(body); }
void GraphCapture::on_side_stream(const std::function<void()>& fn) {
  c10::cuda::CUDAGuard guard(impl_->device);
  impl_->on_side_stream(fn);
}
bool GraphCapture::captured() const { return impl_->graph != nullptr; }
const std::string& GraphCapture::why_refused() const { return impl_->why; }

#else

struct GraphCapture::Impl {
  std::string why = "this build's LibTorch has no CUDA";
};

GraphCapture::GraphCapture(torch::Device, int) {
  fail("a captured step (learner.cuda_graph) needs a CUDA build: this build's LibTorch has no CUDA");
}
GraphCapture::Ran GraphCapture::run(const std::function<void()>&) { return Ran::refused; }
void GraphCapture::on_side_stream(const std::function<void()>& fn) { fn(); }
bool GraphCapture::captured() const { return false; }
const std::string& GraphCapture::why_refused() const { return impl_->why; }

#endif

GraphCapture::~GraphCapture() = default;

}  // namespace tandem
