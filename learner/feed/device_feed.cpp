#include "learner/feed/device_feed.hpp"

#include <fmt/format.h>

#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/cuda.hpp"
#include "common/error.hpp"
#include "common/log.hpp"
#include "shm/dataset_cache.hpp"

#ifdef TANDEM_TORCH_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include "learner/feed/gpu_normalizer.hpp"
#endif

namespace tandem::feed {
namespace {

void require_gpu(const FeedOptions& options) {
#ifdef TANDEM_TORCH_CUDA
  const int visible = cuda::device_count();
  if (visible == 0)
    fail("DeviceFeed needs a CUDA GPU and none is visible to this process: use HostFeed, which runs on the CPU");
  if (static_cast<int>(options.device_index) >= visible)
    fail("DeviceFeed device_index {} is out of range: {} GPUs are visible", options.device_index, visible);
#else
  (void)options;
  fail("DeviceFeed needs a CUDA GPU and this build's LibTorch has no CUDA: use HostFeed, which runs on the CPU");
#endif
}

#ifdef TANDEM_TORCH_CUDA
// A batch tensor the caller offered for refilling can take this output as it is.
bool fits(const torch::Tensor& t, at::IntArrayRef shape, const torch::TensorOptions& options) {
  return t.defined() && t.sizes() == shape && t.dtype() == options.dtype() && t.device() == options.device() &&
         t.is_contiguous();
}

struct DeviceCopy {
  torch::Tensor x;  // uint8 or float32 [split samples, sample shape...], as in the cache
  torch::Tensor y;  // int64 or float32 [split samples, target shape...]
};

// One copy per (cache contents, split, GPU) in this process, shared by its feeds and freed with the
// last of them. The checksum in the key keeps a cache replaced under the same name (--force) apart.
std::shared_ptr<DeviceCopy> device_copy(const shm::DatasetCache& cache, const FeedOptions& options,
                                        const FeedLayout& layout) {
  static std::mutex mu;
  static std::map<std::string, std::weak_ptr<DeviceCopy>> copies;
  const std::string key = fmt::format("{}/{:016x}/{}/{}", layout.dataset, cache.descriptor().payload_checksum,
                                      options.split, options.device_index);
  std::lock_guard lock(mu);
  if (auto live = copies[key].lock()) return live;

  const auto n = static_cast<std::int64_t>(layout.end - layout.begin);
  std::vector<std::int64_t> shape{n};
  shape.insert(shape.end(), layout.sample_shape.begin(), layout.sample_shape.end());
  const torch::Device device(torch::kCUDA, static_cast<c10::DeviceIndex>(options.device_index));
  // The mapping is read-only; from_blob wants a mutable pointer, and the copy only reads it.
  auto* x = const_cast<std::byte*>(layout.x + layout.begin * layout.x_stride);
  auto* y = const_cast<std::byte*>(layout.y + layout.begin * layout.y_stride);
  auto copy = std::make_shared<DeviceCopy>();
  copy->x = torch::from_blob(x, shape, layout.x_float ? torch::kFloat : torch::kByte).to(device);
  copy->y = torch::from_blob(y, layout.y_batch_shape(static_cast<std::uint64_t>(n)), target_dtype(layout)).to(device);
  log::debug("DeviceFeed: copied {} samples of '{}' ({} bytes) to GPU {}", n, layout.dataset,
             n * static_cast<std::int64_t>(layout.sample_bytes()), options.device_index);
  copies[key] = copy;
  return copy;
}
#endif

}  // namespace

struct DeviceFeed::Impl {
  FeedOptions options;
  FeedLayout layout;
  EpochSampler sampler;
  std::uint64_t epoch;
  std::uint64_t index = 0;  // next step within the epoch
  std::uint64_t step_samples;
#ifdef TANDEM_TORCH_CUDA
  c10::DeviceIndex device;
  std::shared_ptr<DeviceCopy> copy;
  torch::Tensor order;  // this epoch's rows, relative to the split: int64 on the GPU
  bool order_current = false;
  cudaStream_t last_stream = nullptr;
  std::optional<GpuNormalizer> normalizer;
#endif
  std::future<std::vector<std::int64_t>> next_rows;  // last member: destroyed (waited for) first

  Impl(const shm::DatasetCache& cache, const FeedOptions& o, std::uint64_t first_epoch)
      : options((require_gpu(o), o)),
        layout(describe_feed(cache, o)),
        sampler(make_feed_sampler(layout, o)),
        epoch(first_epoch),
        step_samples(o.batch_size * o.consumers) {
#ifdef TANDEM_TORCH_CUDA
    device = static_cast<c10::DeviceIndex>(o.device_index);
    c10::cuda::CUDAGuard guard(device);
    copy = device_copy(cache, o, layout);
    normalizer.emplace("DeviceFeed", layout, device);
#endif
  }

  ~Impl() {  // NOLINT(modernize-use-equals-default): empty only in a build without CUDA
#ifdef TANDEM_TORCH_CUDA
    // Kernels already enqueued may still read the split copy and this epoch's order.
    if (last_stream != nullptr && cudaStreamSynchronize(last_stream) != cudaSuccess)
      log::error("DeviceFeed: waiting for the consumer's stream failed: {}", cudaGetErrorString(cudaGetLastError()));
#endif
  }

  std::vector<std::int64_t> rows_of(std::uint64_t e) const {
    const auto order = sampler.epoch_order(e);
    std::vector<std::int64_t> rows(order.size());
    for (std::size_t i = 0; i < order.size(); ++i) rows[i] = static_cast<std::int64_t>(order[i] - layout.begin);
    return rows;
  }

#ifdef TANDEM_TORCH_CUDA
  // Uploads this epoch's order from pinned memory without waiting (the caching host allocator keeps
  // the pinned block until the copy is done) and starts computing the next epoch's.
  void upload_order() {
    std::vector<std::int64_t> rows = next_rows.valid() ? next_rows.get() : rows_of(epoch);
    auto host = torch::from_blob(rows.data(), {static_cast<std::int64_t>(rows.size())}, torch::kLong).pin_memory();
    order = host.to(torch::TensorOptions().dtype(torch::kLong).device(torch::kCUDA, device), /*non_blocking=*/true);
    next_rows = std::async(std::launch::async, [this, e = epoch + 1] { return rows_of(e); });
    order_current = true;
  }

  // On to the next step; past the epoch's last, the next epoch (its order is uploaded when first used).
  void advance() {
    if (++index == sampler.length()) {
      index = 0;
      ++epoch;
      order_current = false;
    }
  }
#endif

  Step rows_into(const torch::Tensor& rows) {
#ifdef TANDEM_TORCH_CUDA
    c10::cuda::CUDAGuard guard(device);
    last_stream = c10::cuda::getCurrentCUDAStream(device).stream();
    if (!order_current) upload_order();
    const std::uint64_t n = sampler.batch_samples(index);
    if (static_cast<std::uint64_t>(rows.numel()) != n || n != step_samples)
      fail("DeviceFeed: a captured step takes {} rows, step {} of epoch {} has {}: use drop_last", rows.numel(), index,
           epoch, n);
    rows.copy_(order.narrow(0, static_cast<std::int64_t>(index * step_samples), static_cast<std::int64_t>(n)),
               /*non_blocking=*/true);
    Step step{epoch, index, {}};
    advance();
    return step;
#else
    (void)rows;
    fail("DeviceFeed needs a CUDA GPU");
#endif
  }

  void gather(const torch::Tensor& rows, Batch& out) const {
#ifdef TANDEM_TORCH_CUDA
    c10::cuda::CUDAGuard guard(device);
    normalizer->apply(copy->x, copy->y, rows, 0, out, c10::cuda::getCurrentCUDAStream(device).stream());
#else
    (void)rows;
    (void)out;
    fail("DeviceFeed needs a CUDA GPU");
#endif
  }

  Step next(const std::vector<Batch>& refill) {
#ifdef TANDEM_TORCH_CUDA
    c10::cuda::CUDAGuard guard(device);
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(device).stream();
    last_stream = stream;
    if (!order_current) upload_order();

    const std::uint64_t n = sampler.batch_samples(index);
    const std::uint64_t offset = index * step_samples;
    const auto as_float = torch::TensorOptions().dtype(torch::kFloat).device(torch::kCUDA, device);
    const auto as_y = torch::TensorOptions().dtype(target_dtype(layout)).device(torch::kCUDA, device);
    Step step{epoch, index, {}};
    step.batches.reserve(options.consumers);
    for (std::uint32_t c = 0; c < options.consumers; ++c) {
      const std::uint64_t begin = consumer_begin(n, c, options.consumers);
      const auto m = static_cast<std::int64_t>(consumer_begin(n, c + 1, options.consumers) - begin);
      const auto x_shape = layout.batch_shape(static_cast<std::uint64_t>(m));
      const auto y_shape = layout.y_batch_shape(static_cast<std::uint64_t>(m));
      Batch b = c < refill.size() && fits(refill[c].x, x_shape, as_float) && fits(refill[c].y, y_shape, as_y)
                    ? refill[c]
                    : Batch{torch::empty(x_shape, as_float), torch::empty(y_shape, as_y)};
      if (m > 0) normalizer->apply(copy->x, copy->y, order, static_cast<std::int64_t>(offset + begin), b, stream);
      step.batches.push_back(std::move(b));
    }
    advance();
    return step;
#else
    (void)refill;
    fail("DeviceFeed needs a CUDA GPU");
#endif
  }
};

DeviceFeed::DeviceFeed(const shm::DatasetCache& cache, const FeedOptions& options, std::uint64_t first_epoch)
    : impl_(std::make_unique<Impl>(cache, options, first_epoch)) {}
DeviceFeed::~DeviceFeed() = default;
DeviceFeed::DeviceFeed(DeviceFeed&&) noexcept = default;
DeviceFeed& DeviceFeed::operator=(DeviceFeed&&) noexcept = default;

std::uint64_t DeviceFeed::length() const { return impl_->sampler.length(); }
const EpochSampler& DeviceFeed::sampler() const { return impl_->sampler; }
Step DeviceFeed::next() { return impl_->next({}); }
Step DeviceFeed::next(const std::vector<Batch>& refill) { return impl_->next(refill); }

std::uintptr_t DeviceFeed::current_stream() const {
#ifdef TANDEM_TORCH_CUDA
  return reinterpret_cast<std::uintptr_t>(c10::cuda::getCurrentCUDAStream(impl_->device).stream());
#else
  return 0;
#endif
}
Step DeviceFeed::next_rows(const torch::Tensor& rows) { return impl_->rows_into(rows); }
void DeviceFeed::gather(const torch::Tensor& rows, Batch& out) const { impl_->gather(rows, out); }

}  // namespace tandem::feed
