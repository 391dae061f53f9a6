// Node-local backend of comm.hpp for CPU ranks that all share one node: shm::NodeGroup (one
// shared-memory segment per job, shm/node_group.hpp), driven one of two ways:
//   worker thread: ops run on one thread per rank strictly in the order they were issued (the same
//     order on every rank), so an all-reduce launched from an autograd hook proceeds while backward
//     goes on, as Gloo's async work does. That pays only where a core is free to run it.
//   caller: the issuing thread runs each op at once and gets back a finished Pending. Where the ranks'
//     threads fill the node's cores, a worker only takes CPU from backward and adds two thread
//     hand-offs (a futex wake and a context switch each) per op: on 2 cores with 2 ranks this mode
//     made the cnn's step 0.4 ms (4 %) shorter (docs/BENCHMARKS.md).
#include <c10/core/ScalarType.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "common/error.hpp"
#include "learner/ddp/comm.hpp"
#include "learner/ddp/rank_env.hpp"
#include "shm/node_group.hpp"

namespace tandem::ddp {
namespace {

constexpr const char* kGroupKey = "node_reduce_group";

struct Op {
  at::Tensor tensor;       // keeps the memory alive until the op is done
  bool sum = true;         // all-reduce sum (x scale, then rank 0's `rank0_bytes`), else broadcast from `root`
  float scale = 1.0f;
  at::Tensor rank0_bytes;  // undefined: none
  int root = 0;
  bool done = false;
  shm::NodeGroup::Outcome outcome;
};

class ShmCommunicator final : public Communicator {
 public:
  ShmCommunicator(shm::NodeGroup group, std::chrono::milliseconds timeout, bool caller_runs_ops)
      : group_(std::move(group)), timeout_(timeout) {
    if (!caller_runs_ops) worker_ = std::thread([this] { run(); });
  }
  ~ShmCommunicator() override {
    if (!worker_.joinable()) return;
    {
      std::lock_guard lock(mutex_);
      closing_ = true;
    }
    work_.notify_all();
    worker_.join();
  }

  std::unique_ptr<Pending> all_reduce_sum(const at::Tensor& t, double scale, const at::Tensor& rank0_bytes) override {
    if (!t.device().is_cpu() || t.scalar_type() != at::kFloat || !t.is_contiguous())
      fail("the node's shared-memory all-reduce sums contiguous float32 CPU tensors, not {} on {}",
           c10::toString(t.scalar_type()), t.device().str());
    if (rank0_bytes.defined()) require_cpu_contiguous(rank0_bytes);
    auto op = std::make_shared<Op>();
    op->tensor = t;
    op->scale = static_cast<float>(scale);
    op->rank0_bytes = rank0_bytes;
    return std::make_unique<ShmPending>(*this, issue(std::move(op)));
  }
  void broadcast(const at::Tensor& t, int root) override {
    require_cpu_contiguous(t);
    auto op = std::make_shared<Op>();
    op->tensor = t;
    op->sum = false;
    op->root = root;
    ShmPending(*this, issue(std::move(op))).wait();
  }
  void abort() override { group_.abort(); }
  const char* backend() const override {
    return worker_.joinable() ? "shared memory (a worker thread per rank)" : "shared memory (run by the training thread)";
  }
  bool runs_ops_on_caller() const override { return !worker_.joinable(); }

 private:
  class ShmPending final : public Pending {
   public:
    ShmPending(ShmCommunicator& owner, std::shared_ptr<Op> op) : owner_(owner), op_(std::move(op)) {}
    void wait() override {
      std::unique_lock lock(owner_.mutex_);
      owner_.finished_.wait(lock, [&] { return op_->done; });
      if (!op_->outcome) fail("shared-memory collective failed: {}", op_->outcome.describe());
    }

   private:
    ShmCommunicator& owner_;
    std::shared_ptr<Op> op_;
  };

  static void require_cpu_contiguous(const at::Tensor& t) {
    if (!t.device().is_cpu() || !t.is_contiguous())
      fail("the node's shared-memory broadcast moves contiguous CPU tensors, not one on {}", t.device().str());
  }

  std::shared_ptr<Op> issue(std::shared_ptr<Op> shared) {
    if (!worker_.joinable()) {  // the caller runs it
      shared->outcome = execute(*shared);
      shared->done = true;
      return shared;
    }
    {
      std::lock_guard lock(mutex_);
      queue_.push_back(shared);
    }
    work_.notify_one();
    return shared;
  }

  void run() {
    for (;;) {
      std::shared_ptr<Op> op;
      {
        std::unique_lock lock(mutex_);
        work_.wait(lock, [&] { return closing_ || !queue_.empty(); });
        if (queue_.empty()) return;
        op = std::move(queue_.front());
        queue_.pop_front();
      }
      const auto outcome = execute(*op);
      {
        std::lock_guard lock(mutex_);
        op->outcome = outcome;
        op->done = true;
      }
      finished_.notify_all();
    }
  }

  shm::NodeGroup::Outcome execute(const Op& op) {
    const at::Tensor& t = op.tensor;
    if (!op.sum) return group_.broadcast(t.data_ptr(), t.nbytes(), op.root, timeout_);
    shm::RidingBroadcast then;
    if (op.rank0_bytes.defined()) then = {op.rank0_bytes.data_ptr(), op.rank0_bytes.nbytes(), 0};
    return group_.all_reduce_sum(t.data_ptr<float>(), static_cast<std::size_t>(t.numel()), op.scale, timeout_, then);
  }

  shm::NodeGroup group_;
  std::chrono::milliseconds timeout_;
  std::mutex mutex_;
  std::condition_variable work_, finished_;
  std::deque<std::shared_ptr<Op>> queue_;
  bool closing_ = false;
  std::thread worker_;  // none where the caller runs the ops; last: started once everything it reads exists
};

}  // namespace

std::unique_ptr<Communicator> make_node_shm(const c10::intrusive_ptr<c10d::Store>& store, const RankInfo& rank,
                                            std::string_view job, std::chrono::milliseconds join_timeout,
                                            std::chrono::milliseconds timeout, bool caller_runs_ops) {
  shm::NodeGroup group;
  if (rank.rank == 0) {
    group = shm::NodeGroup::create(job, rank.world_size);
    const std::string& name = group.name();
    store->set(kGroupKey, std::vector<std::uint8_t>(name.begin(), name.end()));
  } else {
    std::vector<std::uint8_t> name;
    try {
      name = store->get(kGroupKey);  // waits up to the store's timeout (the rendezvous timeout)
    } catch (const std::exception& e) {
      const std::string what = e.what();
      fail("rank {}: rank 0 never handed out the node's shared-memory reduce group ({}): read rank 0's log",
           rank.rank, what.substr(0, what.find('\n')));
    }
    group = shm::NodeGroup::attach(std::string(name.begin(), name.end()), rank.rank, rank.world_size);
  }
  if (auto joined = group.join(join_timeout); !joined)
    fail("rank {}: the node's shared-memory reduce group did not form: {}", rank.rank, joined.describe());
  return std::make_unique<ShmCommunicator>(std::move(group), timeout, caller_runs_ops);
}

}  // namespace tandem::ddp
