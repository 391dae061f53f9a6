// GradSync: data-parallel gradient averaging for one model replica per rank (DDP without Python).
//
//   GradSync sync(flat, params, comm, rank, {first_mb, mb, timeout});   // after flatten, before training
//   sync.broadcast_from_rank0(optimizer_state);                          // start, and after a resume
//   loop: sync.vote_stop(local_stop); forward; backward;  sync.finish(step);  optimizer step;
//         if (sync.stop_agreed()) break;
//
// Layout: every trainable parameter's .grad is a view into ONE float32 buffer, packed densely in
// registration order (so the optimizer's fused flat update still applies), plus one trailing element:
// the stop vote. The communicator provides the buffer (comm.hpp gradient_buffer: with shm, this
// rank's slot in the node's shared memory, reduced in place). Buckets are contiguous ranges of that buffer in REVERSE registration order -- the
// last layers' gradients are ready first in backward -- the first ddp.bucket_first_mb, the rest
// ddp.bucket_mb (a parameter larger than a bucket is a bucket of its own).
// Hooks: a post-hook on each parameter's AccumulateGrad node (LibTorch 1.13 has no post-accumulate
// hook on tensors; torch's reducer does the same) counts the bucket down; when a bucket's last
// gradient has accumulated, that bucket and any ready ones after it are launched as all-reduces with
// the 1/world average fused in (comm.hpp), while backward goes on. Buckets are launched strictly in
// bucket order, the same on every rank, which the backends need (comm.hpp). The last bucket carries
// rank 0's buffers (BatchNorm's running statistics) to every rank, so the ranks' flat parameters AND
// buffers stay bitwise equal (docs/DATA_PARALLEL.md says why).
// finish() launches what backward did not reach (parameters unused this step) and waits for every
// bucket.
// Stop agreement: the vote rides in bucket 0 as 1.0 or 0.0, averaged with the gradients; every rank
// sees the same value, > 0 where any rank voted, so every rank stops after the same step at no extra
// collective. On CPUs stop_agreed() answers for this step's vote; on GPUs for the vote of two steps
// before (copied to the host behind the all-reduce, so no step waits for the device), the same lag
// on every rank: a stop takes effect two steps after it was voted.
// Captured (learner.cuda_graph with NCCL, learner/captured_train_step.hpp): forward, backward with its hooks'
// all-reduces, finish_on_device() and the update are recorded once and replayed; after each replay
// after_replay() reads the vote (same lag) and has the communicator watch the replay's collectives.
// A replay reads the vote from pinned memory when it gets there, so a vote must stay cast once cast
// (the learner's do); it may then count from the step before. The ranks agree either way.
//
// Threads: the training thread calls everything; the hooks run on the autograd thread that executes
// backward for it (the same thread on CPU), never concurrently with those calls. A watchdog thread
// ends the process with one line naming the step and the other ranks if finish() is still waiting
// collective_timeout + 5 s after it began (the communicator's own timeout should have fired first).
// Lifetime: hooks stay registered on the model's AccumulateGrad nodes after GradSync is destroyed;
// they then do nothing.
#pragma once

#include <ATen/core/Tensor.h>

#include <chrono>
#include <memory>
#include <vector>

namespace tandem {
class FlatParams;
}

namespace tandem::ddp {

class Communicator;
struct RankInfo;

struct GradSyncOptions {
  double bucket_first_mb = 0.5;
  double bucket_mb = 25.0;
  std::chrono::milliseconds timeout{30000};
};

struct SyncTimes {
  double allreduce_s = 0;  // first bucket launched -> every bucket done (as seen by finish)
  double exposed_s = 0;    // communication not hidden behind backward: the time finish() spent after
                           // backward ended, plus time backward spent issuing all-reduces (where the
                           // caller runs them: ddp.shm_progress)
};

class GradSync {
 public:
  // `params`: the model's trainable parameters in registration order, float32, on one device.
  // `flat`: the model's flat parameters (its buffers are what finish() broadcasts from rank 0).
  GradSync(const FlatParams& flat, std::vector<at::Tensor> params, Communicator& comm, const RankInfo& rank,
           GradSyncOptions options);
  ~GradSync();
  GradSync(const GradSync&) = delete;
  GradSync& operator=(const GradSync&) = delete;

  // Rank 0's parameters, buffers and `extra` tensors (optimizer state) into every rank's.
  void broadcast_from_rank0(const std::vector<at::Tensor>& extra = {});
  // Rank 0's value of `value` (a resume step, a version) on every rank.
  std::int64_t agree(std::int64_t value);
  // Whether `flag` holds on any rank: one small all-reduce that waits for every rank, between steps
  // (the RL learner's ranks agree on a stop after each gather with it, since the vote above only
  // rides a step). UserError naming this rank on a failed collective.
  bool any(bool flag);

  void vote_stop(bool stop);       // before backward: this rank wants to stop after this step
  void finish(std::int64_t step);  // after backward, before the optimizer step; UserError on failure
  // A captured step: finish_on_device() is finish() without reading the vote, recorded into the graph
  // after backward; after_replay() follows each replay (the vote, the watchdog on its collectives).
  bool capturable() const;  // the communicator's ops can be recorded (NCCL)
  void finish_on_device(std::int64_t step);
  void after_replay();
  // Makes the parameters' AccumulateGrad nodes afresh, hooked, on the current stream. LibTorch 2.x
  // runs each node on the stream current when it was made, and a captured step runs on a side stream
  // of its own, which the accumulators must share: autograd would otherwise make the legacy stream
  // wait for the capturing one, which capture refuses. Between steps only, with no autograd graph
  // alive (std::logic_error otherwise).
  void rehook();
  bool stop_agreed() const { return stop_agreed_; }
  SyncTimes last_times() const { return times_; }
  std::size_t bucket_count() const;
  const at::Tensor& grad_buffer() const;  // the flat gradients (+ the vote element at the end)

 private:
  void hook_accumulators();  // one hook per parameter, on its AccumulateGrad node

  struct State;
  struct Local;
  std::shared_ptr<State> state_;  // shared with the hooks, which outlive this object
  std::unique_ptr<Local> local_;  // the watchdog
  bool stop_agreed_ = false;
  SyncTimes times_;
};

}  // namespace tandem::ddp
