#include "common/torch/beside_stream.hpp"

#include <atomic>

#ifdef TANDEM_TORCH_CUDA
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>

#include <map>
#include <mutex>
#include <optional>
#endif

namespace tandem {

using torch::Tensor;

namespace {
std::atomic<bool> enabled{true};
}  // namespace

void set_beside_enabled(bool on) { enabled.store(on, std::memory_order_relaxed); }
bool beside_enabled() { return enabled.load(std::memory_order_relaxed); }

#ifdef TANDEM_TORCH_CUDA

void cuda_wait(const c10::cuda::CUDAStream& first, const c10::cuda::CUDAStream& then) {
  cudaEvent_t e = nullptr;
  C10_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  C10_CUDA_CHECK(cudaEventRecord(e, first.stream()));
  C10_CUDA_CHECK(cudaStreamWaitEvent(then.stream(), e, 0));
  C10_CUDA_CHECK(cudaEventDestroy(e));  // CUDA keeps what the wait needs
}

namespace {

struct Beside {
  std::optional<c10::cuda::CUDAStream> stream;
  bool pending = false;  // work queued beside since the last join
};

std::mutex mutex;
std::map<c10::DeviceIndex, Beside> devices;


// The device's side stream, marked as having work to join; taken from ATen's pool once per device.
// Nullopt where the caller's stream is that same pool stream: there is nothing to run beside.
std::optional<c10::cuda::CUDAStream> side_for(const c10::cuda::CUDAStream& current) {
  const std::lock_guard<std::mutex> lock(mutex);
  Beside& b = devices[current.device_index()];
  if (!b.stream) b.stream = c10::cuda::getStreamFromPool(false, current.device_index());
  if (*b.stream == current) return std::nullopt;
  b.pending = true;
  return b.stream;
}

}  // namespace

Tensor run_beside(const std::function<Tensor()>& fn, std::initializer_list<Tensor> uses) {
  const c10::cuda::CUDAStream current = c10::cuda::getCurrentCUDAStream();
  const std::optional<c10::cuda::CUDAStream> side = beside_enabled() ? side_for(current) : std::nullopt;
  if (!side) return fn();
  cuda_wait(current, *side);
  for (const Tensor& t : uses) t.record_stream(*side);
  Tensor out;
  {
    const c10::cuda::CUDAStreamGuard on_side(*side);
    out = fn();
  }
  if (out.defined()) out.record_stream(current);
  return out;
}

void join_beside() {
  const c10::cuda::CUDAStream current = c10::cuda::getCurrentCUDAStream();
  const std::lock_guard<std::mutex> lock(mutex);
  const auto it = devices.find(current.device_index());
  if (it == devices.end() || !it->second.pending) return;
  it->second.pending = false;
  cuda_wait(*it->second.stream, current);
}

#else

Tensor run_beside(const std::function<Tensor()>& fn, std::initializer_list<Tensor>) { return fn(); }
void join_beside() {}

#endif

}  // namespace tandem
