// HostStaging on a GPU (host_staging.hpp): pinned slots, an H2D copy per step, conversion on the GPU.
// Built only where LibTorch has CUDA.
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include <chrono>
#include <exception>
#include <thread>
#include <utility>

#include "common/cuda.hpp"
#include "common/log.hpp"
#include "learner/feed/gpu_normalizer.hpp"
#include "learner/feed/host_staging.hpp"
#include "learner/feed/sample_gather.hpp"
#include "shm/segment.hpp"

namespace tandem::feed {
namespace {

void CUDART_CB sleep_on_stream(void* microseconds) {
  std::this_thread::sleep_for(std::chrono::microseconds(*static_cast<const unsigned*>(microseconds)));
}

struct PinnedSlot {
  cuda::Buffer pinned;  // the samples' bytes as in the cache, then the targets'
  cuda::Buffer device;  // the same, after the H2D copy
  std::byte* host_x = nullptr;
  std::byte* host_y = nullptr;
  std::byte* dev_x = nullptr;
  std::byte* dev_y = nullptr;
  cuda::Event copied;    // recorded on the copy stream after the slot's H2D copy
  cuda::Event consumed;  // recorded on the consumer's stream after the conversion read it
};

class PinnedStaging final : public HostStaging {
 public:
  PinnedStaging(std::shared_ptr<SlotRing> ring, const FeedLayout& layout, const FeedOptions& options,
                std::uint64_t step_samples)
      : ring_(std::move(ring)),
        layout_(layout),
        device_(static_cast<c10::DeviceIndex>(options.device_index)),
        consumers_(options.consumers),
        copy_delay_us_(options.copy_delay_us),
        slots_(ring_->size()),
        normalizer_("HostFeed", layout, device_) {
    c10::cuda::CUDAGuard guard(device_);
    copy_stream_ = cuda::Stream::create(options.device_index);
    const std::size_t y_offset = shm::align_up(step_samples * layout.x_stride, 64);
    const std::size_t bytes = y_offset + step_samples * layout.y_stride;
    for (auto& slot : slots_) {
      slot.pinned = cuda::Buffer::allocate(cuda::Buffer::Kind::pinned_host, bytes);
      slot.device = cuda::Buffer::allocate(cuda::Buffer::Kind::device, bytes);
      slot.host_x = static_cast<std::byte*>(slot.pinned.data());
      slot.host_y = slot.host_x + y_offset;
      slot.dev_x = static_cast<std::byte*>(slot.device.data());
      slot.dev_y = slot.dev_x + y_offset;
      slot.copied = cuda::Event::create();
      slot.consumed = cuda::Event::create();
    }
  }

  ~PinnedStaging() override {
    try {  // the copy stream and the consumers' conversions may still read the slots
      copy_stream_.synchronize();
      for (auto& slot : slots_) slot.consumed.synchronize();
    } catch (const std::exception& e) {
      log::error("HostFeed: waiting for outstanding GPU work failed: {}", e.what());
    }
  }

  void prepare_worker() override { cuda::set_device(static_cast<int>(device_)); }

  // Gather the raw bytes into the pinned slot; the GPU converts them.
  void fill(std::size_t k, const std::uint64_t* rows, std::uint64_t begin, std::uint64_t end) override {
    PinnedSlot& slot = slots_[k];
    slot.copied.synchronize();  // the slot's previous H2D copy no longer reads the pinned memory
    gather_bytes(layout_, rows, begin, end, slot.host_x, slot.host_y);
  }

  void seal(std::size_t k, std::uint64_t n) override {
    PinnedSlot& slot = slots_[k];
    auto stream = copy_stream_.get();
    if (copy_delay_us_ > 0) TANDEM_CUDA_CHECK(cudaLaunchHostFunc(stream, sleep_on_stream, &copy_delay_us_));
    copy_stream_.wait(slot.consumed.get());  // the last conversion from this slot's device memory is done
    cuda::copy_async(slot.dev_x, slot.host_x, n * layout_.x_stride, stream);
    cuda::copy_async(slot.dev_y, slot.host_y, n * layout_.y_stride, stream);
    slot.copied.record(stream);
  }

  // The slot is free again once the conversion is enqueued (or failed): its events order the rest.
  std::vector<Batch> take(std::uint64_t step, std::uint64_t n) override {
    const std::size_t k = ring_->take(step, 1);
    struct Release {
      SlotRing& ring;
      std::size_t k;
      ~Release() { ring.release(k); }
    } release{*ring_, k};
    return convert(slots_[k], n);
  }

 private:
  std::vector<Batch> convert(PinnedSlot& slot, std::uint64_t n) {
    c10::cuda::CUDAGuard guard(device_);
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream(device_).stream();
    TANDEM_CUDA_CHECK(cudaStreamWaitEvent(stream, slot.copied.get(), 0));
    const auto on_gpu = torch::TensorOptions().device(torch::kCUDA, device_);
    const auto as_x = on_gpu.dtype(layout_.x_float ? torch::kFloat : torch::kByte);
    const auto as_float = on_gpu.dtype(torch::kFloat);
    const auto as_y = on_gpu.dtype(target_dtype(layout_));
    std::vector<Batch> batches;
    batches.reserve(consumers_);
    for (std::uint32_t c = 0; c < consumers_; ++c) {
      const std::uint64_t begin = consumer_begin(n, c, consumers_), end = consumer_begin(n, c + 1, consumers_);
      const auto m = static_cast<std::int64_t>(end - begin);
      Batch b{torch::empty(layout_.batch_shape(end - begin), as_float),
              torch::empty(layout_.y_batch_shape(end - begin), as_y)};
      if (m > 0)
        normalizer_.apply(
            torch::from_blob(slot.dev_x + begin * layout_.x_stride, layout_.batch_shape(end - begin), as_x),
            torch::from_blob(slot.dev_y + begin * layout_.y_stride, layout_.y_batch_shape(end - begin), as_y),
            torch::Tensor(), 0, b, stream);
      batches.push_back(std::move(b));
    }
    slot.consumed.record(stream);
    return batches;
  }

  std::shared_ptr<SlotRing> ring_;
  const FeedLayout& layout_;
  const c10::DeviceIndex device_;
  const std::uint32_t consumers_;
  unsigned copy_delay_us_;  // sleep_on_stream reads it on the copy stream (not const: CUDA passes a void*)
  cuda::Stream copy_stream_;
  std::vector<PinnedSlot> slots_;
  GpuNormalizer normalizer_;
};

}  // namespace

std::unique_ptr<HostStaging> make_pinned_staging(std::shared_ptr<SlotRing> ring, const FeedLayout& layout,
                                                 const FeedOptions& options, std::uint64_t step_samples) {
  return std::make_unique<PinnedStaging>(std::move(ring), layout, options, step_samples);
}

}  // namespace tandem::feed
