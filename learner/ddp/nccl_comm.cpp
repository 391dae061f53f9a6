// NCCL backend of comm.hpp: one communicator per rank (ncclGetUniqueId on rank 0, handed out through
// the rendezvous store; ncclCommInitRank), collectives on a stream of its own. An op is fenced both
// ways with events: the comm stream waits for the compute stream's work so far, and wait() makes the
// compute stream wait for the op; the host never blocks. A watchdog thread polls each op's completion
// event: one still pending after the timeout (a dead or stopped rank) ends the process with one line,
// since CUDA work queued behind it cannot finish.
// Ops issued while the compute stream captures a CUDA graph are recorded into it (NCCL supports
// capture); each replay is then watched as one op.
#include "learner/ddp/comm.hpp"

#include "common/error.hpp"
#include "learner/ddp/rank_env.hpp"

#ifdef TANDEM_HAVE_NCCL
#include <ATen/core/Tensor.h>
#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <condition_variable>
#include <cstdio>
#include <deque>
#include <mutex>
#include <thread>

#include "common/cuda.hpp"
#include "common/nccl.hpp"
#ifdef TANDEM_TORCH_CUDA
#include <c10/cuda/CUDAStream.h>
#endif
#endif

namespace tandem::ddp {

#ifdef TANDEM_HAVE_NCCL
namespace {

cuda::StreamHandle compute_stream(int device) {
#ifdef TANDEM_TORCH_CUDA
  return reinterpret_cast<cuda::StreamHandle>(c10::cuda::getCurrentCUDAStream(device).stream());
#else
  return nullptr;  // no CUDA tensors exist without a CUDA LibTorch: the legacy stream is never used
#endif
}

ncclDataType_t nccl_type(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case c10::ScalarType::Float: return ncclFloat32;
    case c10::ScalarType::BFloat16: return ncclBfloat16;
    case c10::ScalarType::Half: return ncclFloat16;
    case c10::ScalarType::Double: return ncclFloat64;
    case c10::ScalarType::Long: return ncclInt64;
    default: return ncclUint8;  // broadcast of raw bytes
  }
}

class NcclCommunicator;

class NcclPending final : public Pending {
 public:
  NcclPending(cuda::Event done, int device) : done_(std::move(done)), device_(device) {}
  void wait() override { TANDEM_CUDA_CHECK(cudaStreamWaitEvent(compute_stream(device_), done_.get(), 0)); }

 private:
  cuda::Event done_;
  int device_;
};

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, int rank, int device, std::chrono::milliseconds timeout)
      : comm_(comm),
        rank_(rank),
        device_(device),
        timeout_(timeout),
        stream_(cuda::Stream::create(device)),
        watchdog_([this] { watch(); }) {}
  ~NcclCommunicator() override {
    {
      std::lock_guard lock(mutex_);
      closing_ = true;
    }
    wake_.notify_all();
    watchdog_.join();
    if (!aborted_.load()) (void)ncclCommDestroy(comm_);
  }

  std::unique_ptr<Pending> all_reduce_sum(const at::Tensor& t, double scale, const at::Tensor& rank0_bytes) override {
    if (scale != 1.0) t.mul_(scale);  // on the compute stream, which launch() fences the op behind
    return std::make_unique<NcclPending>(launch(
                                             "all-reduce",
                                             [&](cudaStream_t s) {
      TANDEM_NCCL_CHECK(
          ncclAllReduce(t.data_ptr(), t.data_ptr(), static_cast<size_t>(t.numel()), nccl_type(t), ncclSum, comm_, s));
      if (rank0_bytes.defined()) enqueue_broadcast(rank0_bytes, 0, s);
                                             }),
                                         device_);
  }
  void broadcast(const at::Tensor& t, int root) override {
    NcclPending(launch("broadcast", [&](cudaStream_t s) { enqueue_broadcast(t, root, s); }), device_).wait();
  }
  void abort() override {
    if (!aborted_.exchange(true)) (void)ncclCommAbort(comm_);
  }
  const char* backend() const override { return "nccl"; }
  bool capturable() const override { return true; }
  void watch_replay() override {
    cuda::Event replayed = cuda::Event::create();
    replayed.record(compute_stream(device_));
    watch(std::move(replayed), "collectives of a captured step");
  }

 private:
  void enqueue_broadcast(const at::Tensor& t, int root, cudaStream_t s) {
    const bool bytes = nccl_type(t) == ncclUint8;
    const size_t count = bytes ? t.nbytes() : static_cast<size_t>(t.numel());
    TANDEM_NCCL_CHECK(ncclBroadcast(t.data_ptr(), t.data_ptr(), count, nccl_type(t), root, comm_, s));
  }

  // Under capture the op is recorded into the graph, not run: its events exist only there, so the
  // watchdog (which queries events from its own thread) watches each replay instead (watch_replay).
  template <class F>
  cuda::Event launch(const char* what, F&& enqueue) {
    const cuda::StreamHandle compute = compute_stream(device_);
    const bool recording = cuda::capturing(compute);
    cuda::Event ready = cuda::Event::create(), done = cuda::Event::create();
    ready.record(compute);
    stream_.wait(ready.get());
    enqueue(reinterpret_cast<cudaStream_t>(stream_.get()));
    done.record(stream_.get());
    if (!recording) {
      cuda::Event watched = cuda::Event::create();
      watched.record(stream_.get());
      watch(std::move(watched), what);
    }
    return done;
  }

  void watch(cuda::Event event, const char* what) {
    {
      std::lock_guard lock(mutex_);
      in_flight_.push_back({std::move(event), std::chrono::steady_clock::now() + timeout_, what});
    }
    wake_.notify_all();
  }

  void watch() {
    std::unique_lock lock(mutex_);
    while (!closing_) {
      wake_.wait_for(lock, std::chrono::milliseconds(50));
      while (!in_flight_.empty() && in_flight_.front().done.query()) in_flight_.pop_front();
      if (!in_flight_.empty() && std::chrono::steady_clock::now() > in_flight_.front().deadline) {
        // Exits without ncclCommAbort: the driver reclaims the process's work anyway, and an abort
        // waits for the graphs that hold NCCL work (a captured step's) to be released, which the
        // training thread, stuck behind the hung op, never does.
        std::fprintf(stderr,
                     "tandem-learner: rank %d: NCCL %s did not complete within %.0f s: another rank died or "
                     "hangs; exiting\n",
                     rank_, in_flight_.front().what, std::chrono::duration<double>(timeout_).count());
        std::_Exit(1);
      }
    }
  }

  struct InFlight {
    cuda::Event done;
    std::chrono::steady_clock::time_point deadline;
    const char* what;
  };
  ncclComm_t comm_;
  int rank_, device_;
  std::chrono::milliseconds timeout_;
  cuda::Stream stream_;
  std::atomic<bool> aborted_{false};
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<InFlight> in_flight_;
  bool closing_ = false;
  std::thread watchdog_;  // last: started once everything it reads exists
};

}  // namespace

std::unique_ptr<Communicator> make_nccl(const c10::intrusive_ptr<c10d::Store>& store, const RankInfo& rank, int device,
                                        std::chrono::milliseconds timeout) {
  cuda::set_device(device);
  ncclUniqueId id;
  const std::string key = "nccl/unique_id";
  if (rank.rank == 0) {
    TANDEM_NCCL_CHECK(ncclGetUniqueId(&id));
    const auto* b = reinterpret_cast<const std::uint8_t*>(&id);
    store->set(key, std::vector<std::uint8_t>(b, b + sizeof(id)));
  } else {
    store->wait({key}, timeout);
    const std::vector<std::uint8_t> bytes = store->get(key);
    if (bytes.size() != sizeof(id))
      fail(
          "rank {}: the NCCL id in the store has {} bytes, not {}: ranks run different "
          "NCCL builds; use one build on every node",
          rank.rank, bytes.size(), sizeof(id));
    std::memcpy(&id, bytes.data(), sizeof(id));
  }
  ncclComm_t comm = nullptr;
  TANDEM_NCCL_CHECK(ncclCommInitRank(&comm, rank.world_size, id, rank.rank));
  return std::make_unique<NcclCommunicator>(comm, rank.rank, device, timeout);
}

#else

std::unique_ptr<Communicator> make_nccl(const c10::intrusive_ptr<c10d::Store>&, const RankInfo& rank, int,
                                        std::chrono::milliseconds) {
  fail(
      "rank {}: learner.device = \"cuda\" with several ranks needs NCCL, and this build has none: rebuild with "
      "NCCL (meson -Dnccl=enabled) or train on \"cpu\"",
      rank.rank);
}

#endif

}  // namespace tandem::ddp
