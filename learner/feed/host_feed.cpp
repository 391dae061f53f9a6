#include "learner/feed/host_feed.hpp"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "common/cuda.hpp"
#include "common/error.hpp"
#include "common/log.hpp"
#include "shm/dataset_cache.hpp"

#ifdef TANDEM_TORCH_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif
#ifdef TANDEM_FEED_KERNEL
#include "learner/feed/gather_kernel.hpp"
#endif

namespace tandem::feed {
namespace {

// free -> filling (workers gather its chunks) -> ready (staged; on a GPU its H2D copy is enqueued)
//   -> CPU: held (the consumer's tensors view it) -> free when the last of them is released
//   -> GPU: free as soon as next() has enqueued the conversion (the events order the rest)
enum class SlotState { free, filling, ready, held };

struct Slot {
  SlotState state = SlotState::free;
  std::uint64_t step = 0;           // the step it is filling / holds
  std::uint64_t chunks = 0;
  std::uint64_t chunks_done = 0;
  std::uint32_t holders = 0;        // CPU: live tensors that view the slot

  std::unique_ptr<float[]> cpu_x;   // CPU: converted samples
  std::unique_ptr<std::int64_t[]> cpu_y;

  cuda::Buffer pinned;              // GPU: uint8 samples, then labels
  cuda::Buffer device;              // GPU: the same, after the H2D copy
  std::uint8_t* host_x = nullptr;
  std::int64_t* host_y = nullptr;
  std::uint8_t* dev_x = nullptr;
  std::int64_t* dev_y = nullptr;
  cuda::Event copied;               // recorded on the copy stream after the slot's H2D copy
  cuda::Event consumed;             // recorded on the consumer's stream after the conversion read it
};

// Shared by the feed and by the deleters of the CPU tensors it hands out, so that a tensor released
// after the feed is gone still finds its slot (and keeps the memory alive).
struct Ring {
  std::mutex mu;
  std::condition_variable work_cv;   // workers: a slot became free, or stop
  std::condition_variable ready_cv;  // consumer: a slot became ready, or a worker failed
  std::vector<Slot> slots;
  bool stop = false;
  std::exception_ptr error;
  std::uint64_t fill_step = 0;       // the step whose chunks workers claim next
  std::uint64_t fill_chunk = 0;

  void release(std::size_t k) {
    {
      std::lock_guard lock(mu);
      if (--slots[k].holders > 0) return;
      slots[k].state = SlotState::free;
    }
    work_cv.notify_all();
  }
};

bool choose_gpu(const FeedOptions& o) {
  if (o.placement == Placement::cpu) return false;
  const int visible = cuda::device_count();
#ifdef TANDEM_TORCH_CUDA
  if (o.placement == Placement::automatic && visible == 0) return false;
  if (visible == 0) fail("HostFeed placement cuda needs a GPU and none is visible: use placement cpu or automatic");
  if (static_cast<int>(o.device_index) >= visible)
    fail("HostFeed device_index {} is out of range: {} GPUs are visible", o.device_index, visible);
  return true;
#else
  if (o.placement == Placement::automatic) return false;
  fail("HostFeed placement cuda needs LibTorch with CUDA ({} GPUs visible, this build's LibTorch is CPU-only): "
       "use placement cpu or rebuild against LibTorch with CUDA",
       visible);
#endif
}

#ifdef TANDEM_TORCH_CUDA
void CUDART_CB sleep_on_stream(void* microseconds) {
  std::this_thread::sleep_for(std::chrono::microseconds(*static_cast<const unsigned*>(microseconds)));
}
#endif

}  // namespace

struct HostFeed::Impl {
  FeedOptions options;
  FeedLayout layout;
  EpochSampler sampler;
  std::uint64_t first_epoch;
  bool gpu;
  std::uint64_t step_samples;
  std::shared_ptr<Ring> ring = std::make_shared<Ring>();
  std::uint64_t take_step = 0;

  std::mutex order_mu;
  std::vector<std::pair<std::uint64_t, std::shared_ptr<const std::vector<std::uint64_t>>>> orders;

  cuda::Stream copy_stream;
#ifdef TANDEM_TORCH_CUDA
#ifdef TANDEM_FEED_KERNEL
  ChannelAffine affine;
#else
  torch::Tensor scale_t, bias_t;  // [1, channels, 1] on the GPU
#endif
#endif
  std::vector<std::thread> workers;

  Impl(const shm::DatasetCache& cache, const FeedOptions& o, std::uint64_t first)
      : options(o),
        layout(describe_feed(cache, o)),
        sampler(make_feed_sampler(layout, o)),
        first_epoch(first),
        gpu(choose_gpu(o)),
        step_samples(o.batch_size * o.consumers) {
    if (options.ring_slots < 2)
      fail("HostFeed ring_slots is {}: it needs at least 2 (one staged while one is consumed)", options.ring_slots);
    ring->slots.resize(options.ring_slots);
    if (gpu) allocate_gpu();
    else
      for (auto& slot : ring->slots) {
        slot.cpu_x = std::make_unique_for_overwrite<float[]>(step_samples * layout.x_stride);
        slot.cpu_y = std::make_unique_for_overwrite<std::int64_t[]>(step_samples);
      }
    start_workers();
  }

  ~Impl() {
    {
      std::lock_guard lock(ring->mu);
      ring->stop = true;
    }
    ring->work_cv.notify_all();
    for (auto& t : workers) t.join();
    if (!gpu) return;
    try {  // the copy stream and the consumers' conversions may still read the slots
      copy_stream.synchronize();
      for (auto& slot : ring->slots) slot.consumed.synchronize();
    } catch (const std::exception& e) {
      log::error("HostFeed: waiting for outstanding GPU work failed: {}", e.what());
    }
  }

  void allocate_gpu() {
#ifdef TANDEM_TORCH_CUDA
    const auto device = static_cast<c10::DeviceIndex>(options.device_index);
    c10::cuda::CUDAGuard guard(device);
    copy_stream = cuda::Stream::create(options.device_index);
    const std::size_t y_offset = shm::align_up(step_samples * layout.x_stride, 64);
    const std::size_t bytes = y_offset + step_samples * sizeof(std::int64_t);
    for (auto& slot : ring->slots) {
      slot.pinned = cuda::Buffer::allocate(cuda::Buffer::Kind::pinned_host, bytes);
      slot.device = cuda::Buffer::allocate(cuda::Buffer::Kind::device, bytes);
      slot.host_x = static_cast<std::uint8_t*>(slot.pinned.data());
      slot.host_y = reinterpret_cast<std::int64_t*>(slot.host_x + y_offset);
      slot.dev_x = static_cast<std::uint8_t*>(slot.device.data());
      slot.dev_y = reinterpret_cast<std::int64_t*>(slot.dev_x + y_offset);
      slot.copied = cuda::Event::create();
      slot.consumed = cuda::Event::create();
    }
#ifdef TANDEM_FEED_KERNEL
    if (layout.channels > kMaxAffineChannels)
      fail("HostFeed normalises at most {} channels separately, got {}: give one mean/stddev", kMaxAffineChannels,
           layout.channels);
    affine.channels = static_cast<std::int32_t>(layout.channels);
    affine.plane = static_cast<std::int64_t>(layout.plane);
    std::copy(layout.scale.begin(), layout.scale.end(), affine.scale);
    std::copy(layout.bias.begin(), layout.bias.end(), affine.bias);
#else
    auto on_gpu = torch::TensorOptions().dtype(torch::kFloat).device(torch::kCUDA, device);
    const auto c = static_cast<std::int64_t>(layout.channels);
    scale_t = torch::tensor(layout.scale).view({1, c, 1}).to(on_gpu);
    bias_t = torch::tensor(layout.bias).view({1, c, 1}).to(on_gpu);
#endif
#endif
  }

  void start_workers() {
    unsigned n = options.workers;
    if (n == 0) n = std::clamp(std::thread::hardware_concurrency(), 1u, 8u);
    try {
      for (unsigned i = 0; i < n; ++i) workers.emplace_back([this] { work(); });
    } catch (...) {
      {
        std::lock_guard lock(ring->mu);
        ring->stop = true;
      }
      ring->work_cv.notify_all();
      for (auto& t : workers) t.join();
      throw;
    }
  }

  std::uint64_t epoch_of(std::uint64_t s) const { return first_epoch + s / sampler.length(); }
  std::uint64_t index_of(std::uint64_t s) const { return s % sampler.length(); }
  std::uint64_t samples_of(std::uint64_t s) const { return sampler.batch_samples(index_of(s)); }

  // Epoch orders are computed once and shared by the workers; the last few are kept because
  // workers run up to ring_slots steps ahead of the consumer, possibly into the next epoch.
  std::shared_ptr<const std::vector<std::uint64_t>> order_for(std::uint64_t epoch) {
    std::lock_guard lock(order_mu);
    for (auto& [e, order] : orders)
      if (e == epoch) return order;
    auto order = std::make_shared<const std::vector<std::uint64_t>>(sampler.epoch_order(epoch));
    if (orders.size() == 3) orders.erase(orders.begin());
    orders.emplace_back(epoch, order);
    return order;
  }

  void work() {
    try {
#ifdef TANDEM_TORCH_CUDA
      if (gpu) cuda::set_device(static_cast<int>(options.device_index));
#endif
      Ring& r = *ring;
      const std::size_t slots = r.slots.size();
      for (;;) {
        std::uint64_t s = 0, lo = 0, hi = 0;
        Slot* slot = nullptr;
        {
          std::unique_lock lock(r.mu);
          r.work_cv.wait(lock, [&] { return r.stop || r.fill_chunk > 0 || r.slots[r.fill_step % slots].state == SlotState::free; });
          if (r.stop) return;
          s = r.fill_step;
          slot = &r.slots[s % slots];
          const std::uint64_t n = samples_of(s);
          if (r.fill_chunk == 0) {
            slot->state = SlotState::filling;
            slot->step = s;
            slot->chunks = (n + kChunkSamples - 1) / kChunkSamples;
            slot->chunks_done = 0;
          }
          lo = r.fill_chunk * kChunkSamples;
          hi = std::min(n, lo + kChunkSamples);
          if (++r.fill_chunk == slot->chunks) {
            ++r.fill_step;
            r.fill_chunk = 0;
          }
        }
        auto order = order_for(epoch_of(s));
        const std::uint64_t* rows = order->data() + index_of(s) * step_samples;
        if (gpu) {
          slot->copied.synchronize();  // the slot's previous H2D copy no longer reads the pinned memory
          stage(*slot, rows, lo, hi);
        } else {
          convert(*slot, rows, lo, hi);
        }
        bool last = false;
        {
          std::lock_guard lock(r.mu);
          last = ++slot->chunks_done == slot->chunks;
        }
        if (!last) continue;
        if (gpu) enqueue_copy(*slot, samples_of(s));
        {
          std::lock_guard lock(r.mu);
          slot->state = SlotState::ready;
        }
        r.ready_cv.notify_all();
      }
    } catch (...) {
      {
        std::lock_guard lock(ring->mu);
        if (!ring->error) ring->error = std::current_exception();
        ring->stop = true;
      }
      ring->ready_cv.notify_all();
      ring->work_cv.notify_all();
    }
  }

  // CPU: gather and normalise in one pass, straight into the slot.
  void convert(Slot& slot, const std::uint64_t* rows, std::uint64_t lo, std::uint64_t hi) const {
    const std::uint64_t stride = layout.x_stride;
    for (std::uint64_t j = lo; j < hi; ++j) {
      const auto* in = reinterpret_cast<const std::uint8_t*>(layout.x + rows[j] * stride);
      float* out = slot.cpu_x.get() + j * stride;
      for (std::uint32_t c = 0; c < layout.channels; ++c) {
        const float scale = layout.scale[c], bias = layout.bias[c];
        const std::uint8_t* in_c = in + c * layout.plane;
        float* out_c = out + c * layout.plane;
        for (std::uint64_t e = 0; e < layout.plane; ++e) out_c[e] = static_cast<float>(in_c[e]) * scale + bias;
      }
      std::memcpy(&slot.cpu_y[j], layout.y + rows[j] * sizeof(std::int64_t), sizeof(std::int64_t));
    }
  }

  // GPU: gather the raw bytes into the pinned slot; the GPU converts them.
  void stage(Slot& slot, const std::uint64_t* rows, std::uint64_t lo, std::uint64_t hi) const {
    const std::uint64_t stride = layout.x_stride;
    for (std::uint64_t j = lo; j < hi; ++j) {
      std::memcpy(slot.host_x + j * stride, layout.x + rows[j] * stride, stride);
      std::memcpy(&slot.host_y[j], layout.y + rows[j] * sizeof(std::int64_t), sizeof(std::int64_t));
    }
  }

  void enqueue_copy(Slot& slot, std::uint64_t n) {
#ifdef TANDEM_TORCH_CUDA
    auto stream = copy_stream.get();
    if (options.copy_delay_us > 0) TANDEM_CUDA_CHECK(cudaLaunchHostFunc(stream, sleep_on_stream, &options.copy_delay_us));
    copy_stream.wait(slot.consumed.get());  // the last conversion from this slot's device staging is done
    cuda::copy_async(slot.dev_x, slot.host_x, n * layout.x_stride, stream);
    cuda::copy_async(slot.dev_y, slot.host_y, n * sizeof(std::int64_t), stream);
    slot.copied.record(stream);
#else
    (void)slot, (void)n;
#endif
  }

  std::vector<std::int64_t> shape_of(std::uint64_t n) const {
    std::vector<std::int64_t> shape{static_cast<std::int64_t>(n)};
    shape.insert(shape.end(), layout.sample_shape.begin(), layout.sample_shape.end());
    return shape;
  }

  Step next() {
    const std::uint64_t s = take_step++;
    const std::size_t k = s % ring->slots.size();
    Ring& r = *ring;
    Slot& slot = r.slots[k];
    const std::uint64_t n = samples_of(s);
    const std::uint32_t consumers = options.consumers;
    {
      std::unique_lock lock(r.mu);
      auto staged = [&] { return r.error || (slot.state == SlotState::ready && slot.step == s); };
      bool warned = false;
      while (!r.ready_cv.wait_for(lock, std::chrono::seconds(10), staged))
        if (!warned && slot.state == SlotState::held) {
          log::warn("HostFeed: step {} waits for slot {}, still held by the tensors of step {}: release batches "
                    "sooner or raise ring_slots ({})",
                    s, k, slot.step, r.slots.size());
          warned = true;
        }
      if (r.error) std::rethrow_exception(r.error);
      if (!gpu) {
        slot.state = SlotState::held;
        slot.holders = 0;
        for (std::uint32_t c = 0; c < consumers; ++c)
          if (consumer_begin(n, c + 1, consumers) > consumer_begin(n, c, consumers)) slot.holders += 2;
      }
    }

    Step step{epoch_of(s), index_of(s), {}};
    step.batches.reserve(consumers);
    if (gpu) {
      // The slot is free once the conversion is enqueued (or failed): its events order the rest.
      struct FreeSlot {
        Ring& r;
        Slot& slot;
        ~FreeSlot() {
          {
            std::lock_guard lock(r.mu);
            slot.state = SlotState::free;
          }
          r.work_cv.notify_all();
        }
      } free_slot{r, slot};
      convert_on_gpu(slot, n, step);
      return step;
    }
    for (std::uint32_t c = 0; c < consumers; ++c) {
      const std::uint64_t begin = consumer_begin(n, c, consumers), end = consumer_begin(n, c + 1, consumers);
      const auto m = static_cast<std::int64_t>(end - begin);
      if (m == 0) {
        step.batches.push_back({torch::empty(shape_of(0), torch::kFloat), torch::empty({0}, torch::kLong)});
        continue;
      }
      auto release = [ring = ring, k](void*) { ring->release(k); };
      step.batches.push_back({torch::from_blob(slot.cpu_x.get() + begin * layout.x_stride, shape_of(end - begin), release,
                                               torch::TensorOptions().dtype(torch::kFloat)),
                              torch::from_blob(slot.cpu_y.get() + begin, {m}, release,
                                               torch::TensorOptions().dtype(torch::kLong))});
    }
    return step;
  }

  void convert_on_gpu(Slot& slot, std::uint64_t n, Step& step) {
#ifdef TANDEM_TORCH_CUDA
    const auto device = static_cast<c10::DeviceIndex>(options.device_index);
    c10::cuda::CUDAGuard guard(device);
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream(device).stream();
    TANDEM_CUDA_CHECK(cudaStreamWaitEvent(stream, slot.copied.get(), 0));
    const auto as_float = torch::TensorOptions().dtype(torch::kFloat).device(torch::kCUDA, device);
    const auto as_long = torch::TensorOptions().dtype(torch::kLong).device(torch::kCUDA, device);
    for (std::uint32_t c = 0; c < options.consumers; ++c) {
      const std::uint64_t begin = consumer_begin(n, c, options.consumers);
      const std::uint64_t end = consumer_begin(n, c + 1, options.consumers);
      const auto m = static_cast<std::int64_t>(end - begin);
      Batch b{torch::empty(shape_of(end - begin), as_float), torch::empty({m}, as_long)};
      if (m > 0) {
#ifdef TANDEM_FEED_KERNEL
        GatherArgs args;
        args.x = slot.dev_x + begin * layout.x_stride;
        args.sample_bytes = static_cast<std::int64_t>(layout.x_stride);
        args.y = slot.dev_y + begin;
        args.n = m;
        args.x_out = b.x.data_ptr<float>();
        args.y_out = b.y.data_ptr<std::int64_t>();
        launch_gather_normalize(args, affine, stream);
#else
        const auto as_bytes = torch::TensorOptions().dtype(torch::kByte).device(torch::kCUDA, device);
        b.x.copy_(torch::from_blob(slot.dev_x + begin * layout.x_stride, shape_of(end - begin), as_bytes));
        b.x.view({m, static_cast<std::int64_t>(layout.channels), static_cast<std::int64_t>(layout.plane)})
            .mul_(scale_t)
            .add_(bias_t);
        b.y.copy_(torch::from_blob(slot.dev_y + begin, {m}, as_long));
#endif
      }
      step.batches.push_back(std::move(b));
    }
    slot.consumed.record(stream);
#else
    (void)slot, (void)n, (void)step;
#endif
  }
};

HostFeed::HostFeed(const shm::DatasetCache& cache, const FeedOptions& options, std::uint64_t first_epoch)
    : impl_(std::make_unique<Impl>(cache, options, first_epoch)) {}
HostFeed::~HostFeed() = default;
HostFeed::HostFeed(HostFeed&&) noexcept = default;
HostFeed& HostFeed::operator=(HostFeed&&) noexcept = default;

std::uint64_t HostFeed::length() const { return impl_->sampler.length(); }
bool HostFeed::on_gpu() const { return impl_->gpu; }
const EpochSampler& HostFeed::sampler() const { return impl_->sampler; }
const FeedLayout& HostFeed::layout() const { return impl_->layout; }
Step HostFeed::next() { return impl_->next(); }

}  // namespace tandem::feed
