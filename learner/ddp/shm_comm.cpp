// Node-local backend of comm.hpp for CPU ranks that all share one node: shm::NodeGroup (one
// shared-memory segment per job, shm/node_group.hpp). gradient_buffer() hands each rank its slot in a
// group made for the gradients, and an all-reduce of memory in that slot is a slots op: summed in
// place, piece by piece, by whichever rank is idle. Ops are driven one of two ways:
//   worker thread: ops run on one thread per rank strictly in the order they were issued (the same
//     order on every rank), so an all-reduce launched from an autograd hook proceeds while backward
//     goes on, as Gloo's async work does. That pays only where a core is free to run it.
//   caller: the issuing thread starts a slots op at once (handing its part over never waits) and
//     sums in Pending::wait; any other op it runs at once. Where the ranks' threads fill the node's
//     cores, a worker only takes CPU from backward and adds two thread hand-offs (a futex wake and a
//     context switch each) per op: on 2 cores with 2 ranks this mode made the cnn's step shorter
//     (docs/DATA_PARALLEL.md; measured: docs/results/HISTORY.md).
#include <c10/core/ScalarType.h>
#include <torch/types.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <array>
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
  at::Tensor tensor;     // keeps the memory alive until the op is done
  bool in_slot = false;  // `tensor` lies in this rank's slot of the group: summed in place
  bool sum = true;       // all-reduce sum (x scale, then rank 0's `rank0_bytes`), else broadcast from `root`
  float scale = 1.0f;
  at::Tensor rank0_bytes;  // undefined: none
  int root = 0;
  bool done = false;
  shm::NodeGroup::Outcome outcome;
};

class ShmCommunicator final : public Communicator {
 public:
  ShmCommunicator(shm::NodeGroup group, std::string_view job, std::chrono::milliseconds join_timeout,
                  std::chrono::milliseconds timeout, bool caller_runs_ops)
      : group_(std::move(group)), job_(job), join_timeout_(join_timeout), timeout_(timeout) {
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
    op->in_slot = in_own_slot(t);
    op->scale = static_cast<float>(scale);
    op->rank0_bytes = rank0_bytes;
    if (op->in_slot && !worker_.joinable()) {
      // Handing the gradients over never waits: the caller sums, with the other ranks, in wait().
      auto slots_op = group_.start_slots(slot_offset(t), static_cast<std::size_t>(t.numel()), op->scale, riding(*op));
      return std::make_unique<SlotsPending>(*this, std::move(op), slots_op);
    }
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
    return worker_.joinable() ? "shared memory (a worker thread per rank)"
                              : "shared memory (run by the training thread)";
  }
  // The gradients move into a group of the same ranks with a slot per rank sized for them (a group's
  // size is fixed when rank 0 creates it, before the model exists): rank 0 hands its name out
  // through the current group, every rank joins, and it replaces the current one.
  at::Tensor gradient_buffer(std::int64_t numel, at::Device device) override {
    if (!device.is_cpu()) return Communicator::gradient_buffer(numel, device);
    const int rank = group_.rank(), world = group_.world();
    const auto floats = static_cast<std::size_t>(numel);
    std::array<char, 256> name{};
    shm::NodeGroup slotted;
    if (rank == 0) {
      slotted = shm::NodeGroup::create(job_, world, shm::kReduceChunkBytes, floats);
      if (slotted.name().size() >= name.size())
        fail("the node's reduce group name '{}' is longer than {} bytes: use a shorter job name", slotted.name(),
             name.size() - 1);
      slotted.name().copy(name.data(), name.size() - 1);
    }
    if (auto o = group_.broadcast(name.data(), name.size(), 0, join_timeout_); !o)
      fail("rank {}: handing out the node's gradient slots failed: {}", rank, o.describe());
    if (rank != 0) slotted = shm::NodeGroup::attach(name.data(), rank, world);
    if (auto joined = slotted.join(join_timeout_); !joined)
      fail("rank {}: the node's gradient slots did not form: {}", rank, joined.describe());
    if (slotted.slot_floats() < floats)
      fail(
          "rank {}: the node's gradient slots hold {} floats, this rank needs {}: every rank must train the same "
          "model",
          rank, slotted.slot_floats(), floats);
    {
      std::lock_guard lock(mutex_);  // the worker reads group_ for ops issued after this
      group_ = std::move(slotted);
    }
    auto keep_mapped = group_.mapping();
    return at::from_blob(
        group_.slot(rank), {numel}, [keep_mapped](void*) {}, torch::TensorOptions().dtype(torch::kFloat32));
  }

 private:
  // A slots op the caller started: wait() sums pieces until all are summed (node_group.hpp).
  class SlotsPending final : public Pending {
   public:
    SlotsPending(ShmCommunicator& owner, std::shared_ptr<Op> op, shm::NodeGroup::SlotsOp slots_op)
        : owner_(owner), op_(std::move(op)), slots_op_(slots_op) {}
    void wait() override {
      if (auto o = owner_.group_.finish_slots(slots_op_, owner_.timeout_); !o)
        fail("shared-memory collective failed: {}", o.describe());
    }

   private:
    ShmCommunicator& owner_;
    std::shared_ptr<Op> op_;  // keeps the tensors alive
    shm::NodeGroup::SlotsOp slots_op_;
  };

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

  std::size_t slot_offset(const at::Tensor& t) const {
    return static_cast<std::size_t>(static_cast<const float*>(t.data_ptr()) - group_.slot(group_.rank()));
  }
  static shm::RidingBroadcast riding(const Op& op) {
    if (!op.rank0_bytes.defined()) return {};
    return {op.rank0_bytes.data_ptr(), op.rank0_bytes.nbytes(), 0};
  }

  bool in_own_slot(const at::Tensor& t) const {
    const float* slot = group_.slot(group_.rank());
    const auto* p = static_cast<const float*>(t.data_ptr());
    return slot && p >= slot && p + t.numel() <= slot + group_.slot_floats();
  }

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
    const auto count = static_cast<std::size_t>(t.numel());
    if (op.in_slot)
      return group_.finish_slots(group_.start_slots(slot_offset(t), count, op.scale, riding(op)), timeout_);
    return group_.all_reduce_sum(t.data_ptr<float>(), count, op.scale, timeout_, riding(op));
  }

  shm::NodeGroup group_;
  std::string job_;
  std::chrono::milliseconds join_timeout_, timeout_;
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
      fail("rank {}: rank 0 never handed out the node's shared-memory reduce group ({}): read rank 0's log", rank.rank,
           first_line(e));
    }
    group = shm::NodeGroup::attach(std::string(name.begin(), name.end()), rank.rank, rank.world_size);
  }
  if (auto joined = group.join(join_timeout); !joined)
    fail("rank {}: the node's shared-memory reduce group did not form: {}", rank.rank, joined.describe());
  return std::make_unique<ShmCommunicator>(std::move(group), job, join_timeout, timeout, caller_runs_ops);
}

}  // namespace tandem::ddp
