// Publisher: makes the learner's flat parameters visible in the weight slab (shm/weight_slab.hpp)
// while the training thread waits for no more than a device-to-device snapshot (GPU), or for nothing
// but a slot hand-off and a fence before the optimizer step (CPU, overlapped).
//
// Contract
//  * Threads. publish(), maybe_publish(), wait_before_update(), flush() and stats() are called by the
//    training thread only. The CUDA path owns one internal "committer" thread; the overlapped CPU
//    path one internal "copier" thread; the plain CPU path none. Both run SCHED_BATCH, so that waking
//    one never preempts the training thread inside publish().
//  * CPU source (device = -1), plain (overlap_host_copy = false): publish() takes a free slot, runs
//    one memcpy (or `snapshot`) into it and commits, all on the calling thread. No free slot: the
//    publish is skipped and counted.
//  * CPU source, overlapped (overlap_host_copy = true; publisher_host.cpp): publish() takes a free
//    slot and hands it to the copier, which copies the source into it (memcpy or `snapshot`) while
//    training runs its next forward and backward, then commits. The source must not change until
//    the copy is done: the training thread calls wait_before_update() before anything writes the
//    weights (the optimizer step), and that returns once the copier has read them. Forgetting the
//    fence does not tear a slot (the seqlock still holds) but may publish a mix of two steps. Buffers
//    that the forward pass itself updates in place (BatchNorm running statistics) are copied while
//    it runs: each of their elements is this step's value or the next step's; parameters are exact. A
//    publish() while a copy is still running first waits for it (one copy in flight at most).
//    Ordering: the slot and the job pass between the two threads under `mutex_` (unlock releases,
//    lock acquires), so the slab writer is still used by one thread at a time, and every read of the
//    source by the copier happens-before wait_before_update() returns.
//  * CUDA source: `data` lives on `device` and is updated by work on `stream` (the training stream).
//    publish() enqueues on `stream` a D2D snapshot (or `snapshot`, e.g. a bf16 conversion) into one
//    of two device staging buffers and returns: that copy is the only thing training waits for.
//    The committer thread then, on a dedicated publish stream, waits for the snapshot's event, runs
//    one cudaMemcpyAsync D2H straight into a slot (the whole slot span is cudaHostRegister'ed once),
//    waits for that copy's event and commits (seqlock closes, `latest` moves).
//    Why a host thread rather than cudaLaunchHostFunc: a host function may not call CUDA, so it
//    could not start the next coalesced copy or read event timings; it also runs on the driver's
//    one callback thread and stalls the publish stream while it runs. Our thread can block on the
//    event, commit, and immediately enqueue the next D2H, and its errors surface to the caller.
//  * Device slabs (optional, CUDA source only): writers whose slots live in GPU memory
//    (shm/weight_slab.hpp, "Device slab"; learner/device_chain.hpp): the first on the source's GPU, any
//    others on other GPUs of the node. Each transfer then also runs the DeviceChain: the staging buffer
//    into the first device slot, and from there GPU to GPU into the next, in pipelined chunks. The
//    committer commits each device slot as soon as its last chunk has landed, before the D2H into the
//    host slot has finished: readers on those GPUs see the version without any PCIe transfer. Any slab
//    may be full (all slots leased): that slab skips the version (counted), the others still get it.
//  * Coalescing. At most one D2H is in flight. A publish while one is running snapshots into the
//    other staging buffer; a further publish before that D2H starts overwrites it (the newest
//    snapshot wins; the dropped one counts as `coalesced`). Nothing queues, nothing grows.
//  * Versions are assigned when publish() is called, so they are strictly increasing; a coalesced
//    or skipped publish leaves a gap. next_version() is the version the next publish() will carry.
//  * Errors. CUDA failures on the committer thread, and a failing `snapshot` on the copier, are
//    rethrown by the next publish()/flush().
//  * Lifetime: the slab, the source memory and the stream outlive the Publisher; ~Publisher
//    flushes (waits for the in-flight copy and commits it).
//  * wait_before_update() is a no-op on the CUDA path (the snapshot is ordered before the optimizer's
//    kernels on `stream`) and on the plain CPU path, so callers may call it unconditionally.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "common/cuda.hpp"
#include "common/thread_annotations.hpp"
#include "learner/device_chain.hpp"
#include "learner/publisher_writes.hpp"
#include "shm/weight_slab.hpp"

namespace tandem::learner {

struct PublishSource {
  const std::byte* data = nullptr;      // flat parameters: host memory, or device memory on `device`
  std::size_t bytes = 0;                // bytes of the slot image (<= the slab's slot_bytes)
  int device = -1;                      // -1: host memory (CPU path)
  cuda::StreamHandle stream = nullptr;  // CUDA path: the stream that updates `data`
  // Optional: writes the slot image into dst instead of a plain copy of `data` (bf16 conversion).
  // CPU path: dst is the slot. CUDA path: dst is a device staging buffer, enqueue on `stream`.
  std::function<void(std::byte* dst, cuda::StreamHandle stream)> snapshot;

  static PublishSource host(const std::byte* data, std::size_t bytes) {
    PublishSource s;
    s.data = data;
    s.bytes = bytes;
    return s;
  }
  static PublishSource on_device(const void* data, std::size_t bytes, int device, cuda::StreamHandle stream) {
    PublishSource s = host(static_cast<const std::byte*>(data), bytes);
    s.device = device;
    s.stream = stream;
    return s;
  }
};

struct PublisherOptions {
  std::uint64_t every_steps = 1;  // maybe_publish(): publish when this many steps passed (0 = never by steps)
  double every_ms = 0;            // ... or when this much time passed (0 = never by time)
  // Versions continue after this one (a resumed run: its checkpoint's version), so that a job's
  // versions never go backwards across a resume.
  std::uint64_t after_version = 0;
  // CPU sources: copy on the copier thread, overlapping training; the caller then owes a
  // wait_before_update() before each weight update (see the contract). Ignored for CUDA sources.
  bool overlap_host_copy = false;
};

struct PublishTiming {  // one committed publish
  std::uint64_t version = 0;
  double snapshot_ms = 0;        // CUDA: the D2D snapshot on the training stream (GPU time); CPU: the copy
  double d2h_ms = 0;             // CUDA: the D2H copy (GPU time); CPU: 0
  double visible_ms = 0;         // publish() called -> committed (readers can lease it)
  double device_copy_ms = 0;     // device slab: the D2D copy into its slot (GPU time); 0 without one
  double device_visible_ms = 0;  // device slab: publish() called -> committed there
  // Device slabs on other GPUs: GPU time from the snapshot to the last one's copy, and publish()
  // called -> committed on every one of them; 0 without any (or when this version skipped one).
  double peers_copy_ms = 0;
  double peers_visible_ms = 0;
};

struct PublisherStats {
  std::uint64_t calls = 0, committed = 0, skipped = 0, coalesced = 0;
  std::uint64_t device_committed = 0, device_skipped = 0;  // the device slabs' commits and skips, all together
  double max_call_us = 0, total_call_us = 0;               // host time inside publish()
  // Overlapped CPU path: time inside wait_before_update(), which also blocks the training thread.
  std::uint64_t fences = 0;
  double max_fence_us = 0, total_fence_us = 0;
  double blocked_us() const { return total_call_us + total_fence_us; }  // the training thread's total
};

class Publisher {
 public:
  // device_slabs: none, or one on source.device followed by any on other GPUs (CUDA sources only).
  Publisher(shm::WeightSlabWriter& slab, PublishSource source, PublisherOptions options = {},
            std::vector<OwnedDeviceSlab*> device_slabs = {});
  ~Publisher();
  Publisher(const Publisher&) = delete;
  Publisher& operator=(const Publisher&) = delete;

  enum class Outcome { committed, in_flight, skipped, not_due };
  // [[nodiscard]]: a skipped publish means readers did not get these weights; callers decide whether
  // that is fine (a later publish supersedes it) or not (the final weights: ModelPublisher::publish_final).
  struct [[nodiscard]] Result {
    Outcome outcome;
    std::uint64_t version;  // 0 when not due
  };
  Result publish(std::uint64_t step);
  Result maybe_publish(std::uint64_t step);  // publish() when every_steps / every_ms say it is due
  void flush();                              // returns once nothing is in flight
  // Call before anything changes the source's bytes (the optimizer step): returns once no copy
  // still reads them. Cheap (one uncontended lock) when nothing is in flight.
  void wait_before_update();

  std::uint64_t next_version() const { return next_version_; }
  PublisherStats stats() const;
  std::vector<PublishTiming> take_timings();  // drains the per-publish timings collected so far
  bool on_device() const { return source_.device >= 0; }
  // Tests only: `fault` runs where each device transfer enqueues its copies (under the mutex, on
  // either thread); what it throws stands for a failing CUDA call there. Empty: none.
  void inject_transfer_fault_for_test(std::function<void()> fault);

 private:
  struct Staging;
  struct HostCopy {  // one publish handed to the copier
    shm::WeightSlabWriter::Slot slot;
    std::uint64_t version = 0, step = 0, call_ns = 0;
  };
  Result publish_host(std::uint64_t step, std::uint64_t version, std::uint64_t t0);
  Result hand_to_copier(std::uint64_t step, std::uint64_t version, std::uint64_t t0);
  void copier_loop();
  void copy_into(std::byte* dst);  // the source (or `snapshot`) into a host slot
  Result publish_device(std::uint64_t step, std::uint64_t version, std::uint64_t t0);
  void start_transfer(Staging& s) REQUIRES(mutex_);
  void committer_loop();
  bool wait_copy(Staging& s, const cuda::Event& done) REQUIRES(mutex_);  // released while waiting
  void commit_device(Staging& s, std::size_t hop) REQUIRES(mutex_);
  void abort_slots(Staging& s) REQUIRES(mutex_);
  void enqueue_chain(Staging& s) REQUIRES(mutex_);  // released while enqueueing
  // The snapshot's pieces when a chain to other GPUs follows it (one piece otherwise).
  static constexpr std::size_t kSnapshotPieces = 16;
  std::size_t snapshot_piece_bytes() const { return (source_.bytes + kSnapshotPieces - 1) / kSnapshotPieces; }
  void record(const PublishTiming& t) REQUIRES(mutex_);
  static void run_without_preempting();  // the copier's and the committer's first call
  void rethrow_async_error();

  shm::WeightSlabWriter& slab_;
  std::vector<OwnedDeviceSlab*> device_slabs_;
  PublishSource source_;
  PublisherOptions options_;
  std::uint64_t next_version_ = 1;
  std::uint64_t last_step_ = 0, last_ns_ = 0;
  bool published_once_ = false;

  mutable Mutex mutex_;  // also the staging buffers' states and the slab writes of the two threads
  std::condition_variable changed_;
  PublisherStats stats_ GUARDED_BY(mutex_);
  std::vector<PublishTiming> timings_ GUARDED_BY(mutex_);
  std::exception_ptr async_error_ GUARDED_BY(mutex_);
  std::function<void()> transfer_fault_ GUARDED_BY(mutex_);

  // CUDA path only.
  cuda::HostRegistration registration_;
  cuda::Stream publish_stream_;
  DeviceChain chain_;                              // with device slabs
  std::vector<std::unique_ptr<Staging>> staging_;  // fixed at construction; each one's state: mutex_
  bool stopping_ GUARDED_BY(mutex_) = false;
  std::thread committer_;

  // Overlapped CPU path only: the copy handed to the copier, set until committed (or aborted).
  std::optional<HostCopy> host_copy_ GUARDED_BY(mutex_);
  std::thread copier_;
};

// The verify pattern (shm::fill_verify_pattern) written into device memory on `stream`: a memset
// plus the version stamped into the first and last 8 bytes. For benchmarks and GPU tests.
void fill_verify_pattern_async(void* device_data, std::size_t bytes, std::uint64_t version, cuda::StreamHandle stream);

}  // namespace tandem::learner
