#include "learner/publisher.hpp"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <optional>
#include <utility>

#include "common/clock.hpp"
#include "common/error.hpp"
#include "shm/verify_pattern.hpp"

#ifdef TANDEM_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace tandem::learner {

// One device staging buffer and the events that time and fence its two copies.
struct Publisher::Staging {
  explicit Staging(TransferWrites w) : writes(std::move(w)) {}
  enum class State { free, pending, transferring };
  State state = State::free;
  cuda::Buffer buffer;
  cuda::Event snapshot_start, snapshot_done, d2h_start, d2h_done;
  std::uint64_t version = 0, step = 0, call_ns = 0;
  TransferWrites writes;
  std::vector<std::byte*> chain_dst;         // the device slots' memory, null where skipped
  bool chain_queued = true;                  // the committer has enqueued the chain (or there is none)
  std::vector<cuda::Event> snapshot_pieces;  // with GPUs beyond the first: the snapshot's pieces done
  PublishTiming timing;
};

Publisher::Publisher(shm::WeightSlabWriter& slab, PublishSource source, PublisherOptions options,
                     std::vector<OwnedDeviceSlab*> device_slabs)
    : slab_(slab),
      device_slabs_(std::move(device_slabs)),
      source_(std::move(source)),
      options_(options),
      next_version_(std::max(slab.latest_version(), options.after_version) + 1) {
  if (options_.after_version >= shm::kMaxVersion)
    fail("publisher after_version={} is out of range: use an integer in 0..{} (versions stop at 2**56-1)",
         options_.after_version, shm::kMaxVersion - 1);
  if (source_.bytes == 0 || source_.bytes > slab_.descriptor().slot_bytes)
    fail("publisher: {} bytes do not fit the {}-byte slots of weight slab '/{}': recreate the slab for this model",
         source_.bytes, slab_.descriptor().slot_bytes, slab_.name());
  for (const OwnedDeviceSlab* d : device_slabs_)
    if (!on_device() || source_.bytes > d->writer.descriptor().slot_bytes)
      throw std::logic_error("publisher: a device slab needs a CUDA source that fits its slots");
  if (!device_slabs_.empty() && device_slabs_[0]->device != source_.device)
    throw std::logic_error("publisher: the first device slab must be on the source's GPU");
  if (!on_device()) {
    if (options_.overlap_host_copy) copier_ = std::thread([this] { copier_loop(); });
    return;
  }

  // CUDA path: page-lock the slots in place once; every D2H then runs at pinned bandwidth.
  cuda::set_device(source_.device);
  registration_ = cuda::HostRegistration(slab_.slots_begin(), slab_.slots_span_bytes());
  publish_stream_ = cuda::Stream::create(source_.device);
  std::vector<shm::WeightSlabWriter*> device_writers;
  for (OwnedDeviceSlab* d : device_slabs_) device_writers.push_back(&d->writer);
  for (int i = 0; i < 2; ++i) {
    auto s = std::make_unique<Staging>(TransferWrites(slab_, device_writers));
    s->buffer = cuda::Buffer::allocate(cuda::Buffer::Kind::device, source_.bytes);
    s->snapshot_start = cuda::Event::create(true);
    s->snapshot_done = cuda::Event::create(true);
    s->d2h_start = cuda::Event::create(true);
    s->d2h_done = cuda::Event::create(true);
    if (device_slabs_.size() > 1 && !source_.snapshot)
      for (std::size_t i = 0; i < kSnapshotPieces; ++i) s->snapshot_pieces.push_back(cuda::Event::create(false));
    staging_.push_back(std::move(s));
  }
  if (!device_slabs_.empty()) {
    std::vector<int> devices;
    for (const OwnedDeviceSlab* d : device_slabs_) devices.push_back(d->device);
    chain_ = DeviceChain(std::move(devices), source_.bytes);
  }
  committer_ = std::thread([this] { committer_loop(); });
}

// SCHED_BATCH: an unprivileged change that keeps the thread's share of the CPU, but a woken batch
// thread does not preempt the thread running where it wakes. publish() wakes the copier (or the
// committer) on its way out; on a busy machine the woken thread would otherwise take the training
// thread's CPU inside that call and keep it for a time slice: publish() calls of 2-13 ms instead of
// 0.1 ms, measured on a loaded 2-core machine.
void Publisher::run_without_preempting() {
  sched_param none{};
  (void)pthread_setschedparam(pthread_self(), SCHED_BATCH, &none);
}

Publisher::~Publisher() {
  {
    MutexLock lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  // Each thread finishes what is in flight before it exits: the last publish still lands.
  if (committer_.joinable()) committer_.join();
  if (copier_.joinable()) copier_.join();
}

Publisher::Result Publisher::maybe_publish(std::uint64_t step) {
  const std::uint64_t now = monotonic_ns();
  bool due = !published_once_;
  if (options_.every_steps > 0 && step >= last_step_ + options_.every_steps) due = true;
  if (options_.every_ms > 0 && double(now - last_ns_) >= options_.every_ms * 1e6) due = true;
  if (!due) return {Outcome::not_due, 0};
  return publish(step);
}

Publisher::Result Publisher::publish(std::uint64_t step) {
  const std::uint64_t t0 = monotonic_ns();
  rethrow_async_error();
  published_once_ = true;
  last_step_ = step;
  last_ns_ = t0;
  const std::uint64_t version = next_version_++;
  Result r = on_device() ? publish_device(step, version, t0) : publish_host(step, version, t0);
  const double call_us = double(monotonic_ns() - t0) / 1e3;
  {
    MutexLock lock(mutex_);
    stats_.calls++;
    stats_.total_call_us += call_us;
    stats_.max_call_us = std::max(stats_.max_call_us, call_us);
    if (!on_device() && r.outcome == Outcome::skipped) stats_.skipped++;  // the device path counts in start_transfer
    if (r.outcome == Outcome::committed) stats_.committed++;
  }
  // The copier is woken only after this thread's last lock: woken first, it would take the mutex
  // and, preempted on a busy machine, keep the training thread waiting for milliseconds.
  if (r.outcome == Outcome::in_flight && copier_.joinable()) changed_.notify_all();
  return r;
}

void Publisher::record(const PublishTiming& t) {
  if (timings_.size() < (1u << 20)) timings_.push_back(t);
}

std::vector<PublishTiming> Publisher::take_timings() {
  MutexLock lock(mutex_);
  return std::exchange(timings_, {});
}

PublisherStats Publisher::stats() const {
  MutexLock lock(mutex_);
  return stats_;
}

void Publisher::flush() {
  {
    MutexLock lock(mutex_);
    lock.wait(changed_, [&]() REQUIRES(mutex_) {
      return !host_copy_ &&
             std::none_of(staging_.begin(), staging_.end(), [](auto& s) { return s->state != Staging::State::free; });
    });
  }
  rethrow_async_error();
}

void Publisher::rethrow_async_error() {
  MutexLock lock(mutex_);
  if (async_error_) std::rethrow_exception(std::exchange(async_error_, nullptr));
}

void Publisher::inject_transfer_fault_for_test(std::function<void()> fault) {
  MutexLock lock(mutex_);
  transfer_fault_ = std::move(fault);
}

#ifdef TANDEM_HAVE_CUDA

Publisher::Result Publisher::publish_device(std::uint64_t step, std::uint64_t version, std::uint64_t t0) {
  MutexLock lock(mutex_);
  // The buffer to snapshot into: the one whose snapshot has not started its D2H yet (newest wins),
  // else a free one. With two buffers and at most one transfer there is always one.
  Staging* target = nullptr;
  for (auto& s : staging_)
    if (s->state == Staging::State::pending) target = s.get();
  if (target != nullptr) stats_.coalesced++;
  for (auto& s : staging_)
    if (target == nullptr && s->state == Staging::State::free) target = s.get();
  if (target == nullptr) throw std::logic_error("publisher: no staging buffer (both transferring)");

  std::byte* dst = static_cast<std::byte*>(target->buffer.data());
  target->snapshot_start.record(source_.stream);
  if (source_.snapshot) {
    source_.snapshot(dst, source_.stream);
  } else {
    // In pieces where a chain to other GPUs follows, so that it starts after the first piece.
    const std::size_t pieces = target->snapshot_pieces.size();
    const std::size_t piece = pieces > 0 ? snapshot_piece_bytes() : source_.bytes;
    for (std::size_t i = 0, offset = 0; offset < source_.bytes; ++i, offset += piece) {
      TANDEM_CUDA_CHECK(cudaMemcpyAsync(dst + offset, source_.data + offset, std::min(piece, source_.bytes - offset),
                                        cudaMemcpyDeviceToDevice, source_.stream));
      if (i < pieces) target->snapshot_pieces[i].record(source_.stream);
    }
  }
  target->snapshot_done.record(source_.stream);
  target->state = Staging::State::pending;
  target->version = version;
  target->step = step;
  target->call_ns = t0;

  bool busy = std::any_of(staging_.begin(), staging_.end(),
                          [](auto& s) { return s->state == Staging::State::transferring; });
  if (!busy) start_transfer(*target);  // a failure leaves with target free and its writes aborted
  const bool skipped = target->state == Staging::State::free;  // start_transfer found no free slot
  lock.unlock();
  changed_.notify_all();
  return {skipped ? Outcome::skipped : Outcome::in_flight, version};
}

// Takes a slot in each slab and enqueues the device chain (device slabs) and the D2H; a
// slab with no free slot skips this version (counted); with none at all, the snapshot is dropped.
// A failing CUDA call aborts the writes this call opened and frees `s` before the error leaves.
void Publisher::start_transfer(Staging& s) {
  const bool any = s.writes.open();
  if (!s.writes.host) stats_.skipped++;
  std::vector<std::byte*> chain_dst;
  for (const auto& slot : s.writes.devices) {
    if (!slot) stats_.device_skipped++;
    chain_dst.push_back(slot ? slot->data : nullptr);
  }
  s.state = Staging::State::free;
  if (!any) return;
  const bool any_device = std::any_of(chain_dst.begin(), chain_dst.end(), [](std::byte* p) { return p != nullptr; });
  s.timing = PublishTiming{};
  s.timing.version = s.version;
  s.chain_dst = std::move(chain_dst);
  s.chain_queued = !any_device;  // the committer enqueues it: a few hundred calls, off the training thread
  s.writes.run_or_abort([&]() REQUIRES(mutex_) {
    if (transfer_fault_) transfer_fault_();
    TANDEM_CUDA_CHECK(cudaStreamWaitEvent(publish_stream_.get(), s.snapshot_done.get(), 0));
    if (s.writes.host) {
      s.d2h_start.record(publish_stream_.get());
      TANDEM_CUDA_CHECK(cudaMemcpyAsync(s.writes.host->data, s.buffer.data(), source_.bytes, cudaMemcpyDeviceToHost,
                                        publish_stream_.get()));
      s.d2h_done.record(publish_stream_.get());
    }
  });
  s.state = Staging::State::transferring;
}

// A failed copy aborts both slots' writes and keeps the error for the training thread.
bool Publisher::wait_copy(Staging& s, const cuda::Event& done) {
  mutex_.unlock();
  try {
    done.synchronize();
    mutex_.lock();
    return true;
  } catch (...) {
    mutex_.lock();
    async_error_ = std::current_exception();
    abort_slots(s);
    changed_.notify_all();
    return false;
  }
}

// A failed transfer: its slots go back unpublished, its buffer is free again.
void Publisher::abort_slots(Staging& s) {
  s.writes.abort();
  s.state = Staging::State::free;
}

// Hop 0 is the source GPU's device slab; a version counts as on every other GPU only when none skipped it.
void Publisher::commit_device(Staging& s, std::size_t hop) {
  device_slabs_[hop]->writer.commit(*s.writes.devices[hop], s.version, s.step, source_.bytes, s.call_ns);
  s.writes.devices[hop].reset();
  const double visible_ms = double(monotonic_ns() - s.call_ns) / 1e6;
  stats_.device_committed++;
  if (hop == 0) {
    s.timing.device_visible_ms = visible_ms;
    s.timing.device_copy_ms = chain_.elapsed_ms(0);
  } else if (hop + 1 == device_slabs_.size() &&
             std::all_of(s.chain_dst.begin(), s.chain_dst.end(), [](std::byte* p) { return p != nullptr; })) {
    s.timing.peers_visible_ms = visible_ms;
    s.timing.peers_copy_ms = chain_.elapsed_ms(hop);
  }
}

void Publisher::committer_loop() {
  run_without_preempting();
  cuda::set_device(source_.device);
  MutexLock lock(mutex_);
  for (;;) {
    Staging* active = nullptr;
    lock.wait(changed_, [&]() REQUIRES(mutex_) {
      for (auto& s : staging_)
        if (s->state == Staging::State::transferring) active = s.get();
      return active != nullptr || stopping_;
    });
    if (active == nullptr) return;  // stopping and nothing in flight
    try {
      if (!active->chain_queued) enqueue_chain(*active);
      // The device slots first, in chain order: GPU readers must not wait for the D2H behind them.
      bool failed = false;
      for (std::size_t hop = 0; hop < device_slabs_.size() && !failed; ++hop) {
        if (!active->writes.devices[hop]) continue;
        failed = !wait_copy(*active, chain_.done(hop));
        if (!failed) commit_device(*active, hop);
      }
      if (failed) continue;
      if (active->writes.host && !wait_copy(*active, active->d2h_done)) continue;
      PublishTiming& t = active->timing;
      if (active->writes.host) {
        slab_.commit(*active->writes.host, active->version, active->step, source_.bytes, active->call_ns);
        active->writes.host.reset();
        t.visible_ms = double(monotonic_ns() - active->call_ns) / 1e6;
        t.d2h_ms = cuda::Event::elapsed_ms(active->d2h_start, active->d2h_done);
        stats_.committed++;
      }
      t.snapshot_ms = cuda::Event::elapsed_ms(active->snapshot_start, active->snapshot_done);
      record(t);
      active->state = Staging::State::free;
    } catch (...) {
      async_error_ = std::current_exception();
      abort_slots(*active);
      changed_.notify_all();
      continue;
    }
    // The snapshot that waited for this transfer. Its failure is its own: start_transfer has aborted
    // the writes it opened, and the error waits for the training thread.
    for (auto& s : staging_) {
      if (s->state != Staging::State::pending) continue;
      try {
        start_transfer(*s);
      } catch (...) {
        async_error_ = std::current_exception();
      }
    }
    changed_.notify_all();
  }
}

// The mutex is released while enqueueing: the training thread never waits for it, and only this
// thread touches the chain and a transferring staging buffer's slots.
void Publisher::enqueue_chain(Staging& s) {
  DeviceChain::SourceReady ready;
  for (const cuda::Event& e : s.snapshot_pieces) ready.pieces.push_back(e.get());
  ready.piece_bytes = snapshot_piece_bytes();
  if (ready.pieces.empty()) ready = {{s.snapshot_done.get()}, source_.bytes};  // a bf16 snapshot, or no other GPU
  const std::vector<std::byte*> dst = s.chain_dst;
  mutex_.unlock();
  std::exception_ptr error;
  try {
    chain_.enqueue(s.buffer.data(), ready, dst);
  } catch (...) {
    error = std::current_exception();
  }
  mutex_.lock();
  if (error) std::rethrow_exception(error);
  s.chain_queued = true;
}

void fill_verify_pattern_async(void* device_data, std::size_t bytes, std::uint64_t version, cuda::StreamHandle stream) {
  if (bytes < 16) throw std::invalid_argument("verify pattern needs at least 16 bytes");
  auto* p = static_cast<unsigned char*>(device_data);
  TANDEM_CUDA_CHECK(cudaMemsetAsync(p + 8, shm::verify_byte(version), bytes - 16, stream));
  // One-byte memsets carry the stamps: no host buffer has to outlive the enqueued copy.
  for (int i = 0; i < 8; ++i) {
    const int byte = static_cast<int>((version >> (8 * i)) & 0xff);
    TANDEM_CUDA_CHECK(cudaMemsetAsync(p + i, byte, 1, stream));
    TANDEM_CUDA_CHECK(cudaMemsetAsync(p + bytes - 8 + i, byte, 1, stream));
  }
}

#else  // built without CUDA: a device source cannot be constructed (set_device fails first).

Publisher::Result Publisher::publish_device(std::uint64_t, std::uint64_t version, std::uint64_t) {
  return {Outcome::skipped, version};
}
void Publisher::start_transfer(Staging&) {}
void Publisher::committer_loop() {}
bool Publisher::wait_copy(Staging&, const cuda::Event&) { return false; }
void Publisher::commit_device(Staging&, std::size_t) {}
void Publisher::abort_slots(Staging&) {}
void Publisher::enqueue_chain(Staging&) {}
void fill_verify_pattern_async(void*, std::size_t, std::uint64_t, cuda::StreamHandle) {
  fail("this build of Tandem has no CUDA support: rebuild where the CUDA toolkit is installed");
}

#endif

}  // namespace tandem::learner
