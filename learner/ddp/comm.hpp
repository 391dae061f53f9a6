// The collectives the data-parallel ranks use, behind one interface with three backends:
//   shm (CPU tensors, every rank on one node): shm::NodeGroup, a shared-memory segment the node's
//                       ranks reduce through, ops async on one thread per rank or run by the caller
//                       (ddp.shm_progress; shm_comm.cpp). The default for CPU ranks of one node
//                       (ddp.cpu_collectives): docs/DEPARTURES.md.
//   Gloo (CPU tensors): c10d::ProcessGroupGloo from LibTorch, every op async on Gloo's threads, each
//                       failing after ddp.collective_timeout_s (gloo_comm.cpp). Ranks on several
//                       nodes, or ddp.cpu_collectives = "gloo".
//   NCCL (CUDA tensors): one communicator per rank on a stream of its own, fenced with CUDA events
//                       against the compute stream (nccl_comm.cpp, built where NCCL is found).
// Both are made from the rendezvous store (rendezvous.hpp).
//
// Ordering: every rank must issue the same collectives in the same order (Gloo matches them by a
// sequence tag, NCCL by call order). GradSync issues buckets strictly in bucket order for this reason.
// Threads: one thread issues ops at a time (the training thread, or the autograd thread while it runs
// backward for that training thread: never both at once). Pending::wait may run on the issuing thread
// only. abort() may be called from any thread (the watchdog's): afterwards every op fails.
// Failure: a dead rank, a hung rank past the timeout, or an abort make wait() throw a UserError that
// says which op failed; the caller adds the step and the other ranks.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/intrusive_ptr.h>

#include <chrono>
#include <memory>
#include <string>
#include <string_view>

namespace c10d {
class Store;
}

namespace tandem::ddp {

struct RankInfo;

// An op in flight. wait() returns once its result is in the tensor (Gloo, shm), or once the compute
// stream is fenced behind it (NCCL: later kernels on the compute stream see the result). Where the
// caller runs the ops (shm), the op is done when all_reduce_sum returns and wait() only reports it.
class Pending {
 public:
  virtual ~Pending() = default;
  virtual void wait() = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  // Every rank's `t` (contiguous, float32) x `scale`, summed into every rank's `t`; then, where
  // `rank0_bytes` is defined, rank 0's bytes of it (contiguous, any dtype) into every rank's. Async:
  // both are in place once wait() returns. shm carries both in one round where they fit (the average
  // fused into its copy in); Gloo and NCCL scale first, then run an all-reduce and a broadcast.
  virtual std::unique_ptr<Pending> all_reduce_sum(const at::Tensor& t, double scale, const at::Tensor& rank0_bytes) = 0;
  // Rank `root`'s bytes of `t` (contiguous, any dtype) into every rank's `t`; blocks until done.
  virtual void broadcast(const at::Tensor& t, int root) = 0;
  // Makes every op in flight and every later op fail fast (ncclCommAbort; Gloo: the process exits
  // on its own timeout or through the watchdog, so this only marks the communicator broken).
  virtual void abort() = 0;
  virtual const char* backend() const = 0;  // for the log: what carries the collectives
  // Whether its ops can be recorded into a CUDA graph (a captured data-parallel step, captured_train_step.hpp):
  // NCCL's can; an op issued while the compute stream captures is recorded, not watched.
  virtual bool capturable() const { return false; }
  // After each replay of a captured step: watch the collectives it ran, as an eager op is watched
  // (NCCL: one event behind the replay on the compute stream; past the timeout, abort and exit).
  virtual void watch_replay() {}
  // A zeroed float32 buffer of `numel` elements on `device` for the gradients this communicator will
  // reduce. A collective: every rank calls it once, with the same numel, before any op on it. shm
  // hands out the rank's slot in the node's shared memory, which the all-reduce then sums in place
  // with no copy in or out; the others, ordinary memory.
  virtual at::Tensor gradient_buffer(std::int64_t numel, at::Device device);
};

// The node's shared-memory group: rank 0 creates /tandem.<job>.reduce-<pid> and hands its name out
// through the store; every rank joins within `join_timeout` (UserError naming the missing rank), after
// which the name is unlinked. `timeout` bounds every collective. Only when all ranks share the node.
// `caller_runs_ops`: each op runs on the thread that issues it, else on a worker thread of this rank.
std::unique_ptr<Communicator> make_node_shm(const c10::intrusive_ptr<c10d::Store>& store, const RankInfo& rank,
                                            std::string_view job, std::chrono::milliseconds join_timeout,
                                            std::chrono::milliseconds timeout, bool caller_runs_ops);
// Gloo over the store, for CPU tensors; `timeout` bounds every collective.
std::unique_ptr<Communicator> make_gloo(const c10::intrusive_ptr<c10d::Store>& store, const RankInfo& rank,
                                        std::chrono::milliseconds timeout);
// NCCL over the store (rank 0 puts the unique id in it), on GPU `device`. A UserError where this
// build has no NCCL.
std::unique_ptr<Communicator> make_nccl(const c10::intrusive_ptr<c10d::Store>& store, const RankInfo& rank, int device,
                                        std::chrono::milliseconds timeout);

}  // namespace tandem::ddp
