#include "learner/ddp/grad_sync.hpp"

#include <fmt/format.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/types.h>
#include <torch/utils.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <thread>

#include "common/clock.hpp"
#include "common/error.hpp"
#include "common/torch/flat_params.hpp"
#include "learner/ddp/comm.hpp"
#include "learner/ddp/rank_env.hpp"

#ifdef TANDEM_TORCH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_runtime_api.h>

#include "common/cuda.hpp"
#endif

namespace tandem::ddp {

using Clock = std::chrono::steady_clock;

struct GradSync::State {
  struct Bucket {
    at::Tensor view;                  // a contiguous range of `grads`
    std::vector<std::size_t> params;  // indices into `params`
    std::size_t pending = 0;          // gradients not yet accumulated this step
    std::unique_ptr<Pending> work;    // launched this step
  };
  Communicator* comm = nullptr;
  int world = 1;
  std::vector<at::Tensor> params;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators;  // keeps the hooked nodes alive
  std::vector<std::size_t> bucket_of;                                // param index -> bucket
  std::vector<Bucket> buckets;
  at::Tensor grads;             // float32 [numel + 1]; the last element is the stop vote
  at::Tensor agreed;            // [1] on the gradients' device: the last step's reduced vote
  at::Tensor vote_host;         // [1] float32 (pinned on a GPU): this rank's vote, 1 or 0
  at::Tensor flat_bytes;        // the model's flat parameters and buffers (uint8)
  at::Tensor buffers;           // uint8 view of its buffers' region, or undefined
  std::size_t next_launch = 0;  // buckets launch in order: the first not yet launched
  Clock::time_point first_launch{};
  double issuing_s = 0;  // spent inside all_reduce_sum calls this step (a backend
                         // that runs ops on the caller's thread spends the op there)

  void ready(std::size_t param) {
    Bucket& b = buckets[bucket_of[param]];
    if (b.pending > 0 && --b.pending == 0) launch_ready();
  }
  void launch_ready(bool all = false) {
    while (next_launch < buckets.size() && (all || buckets[next_launch].pending == 0)) {
      Bucket& b = buckets[next_launch];
      if (next_launch == 0) {
        first_launch = Clock::now();
        write_vote();  // averaged with the rest: > 0 where any rank voted
      }
      // The last bucket carries rank 0's buffers: forward has written them for this step and
      // nothing touches them again before the next forward, which runs after finish().
      const bool last = next_launch + 1 == buckets.size();
      const auto issue = Clock::now();
      b.work = comm->all_reduce_sum(b.view, 1.0 / world, last ? buffers : at::Tensor());
      issuing_s += seconds_since(issue);
      ++next_launch;
    }
  }
  // Eagerly the vote goes in as a kernel argument: exactly this step's. A captured step reads it when
  // each replay gets there, from vote_host, which vote_stop() keeps current: it may then land in the
  // step before the one it was cast for, and is never lost as long as it stays cast (the learner's
  // do: a stop request is not withdrawn). Either way every rank reads the same reduced value.
  void write_vote() {
    at::Tensor slot = grads.narrow(0, grads.numel() - 1, 1);
#ifdef TANDEM_TORCH_CUDA
    if (slot.is_cuda()) {
      const cudaStream_t stream = at::cuda::getCurrentCUDAStream(slot.device().index()).stream();
      if (cuda::capturing(reinterpret_cast<cuda::StreamHandle>(stream))) {
        C10_CUDA_CHECK(
            cudaMemcpyAsync(slot.data_ptr(), vote_host.data_ptr(), sizeof(float), cudaMemcpyHostToDevice, stream));
        return;
      }
    }
#endif
    slot.fill_(vote_host.data_ptr<float>()[0]);
  }
};

namespace {

// Ends the process if a collective outlives its timeout by `grace`: the backstop for a Gloo wait
// that never returns (its own timeout fires first in every case we know).
class Watchdog {
 public:
  Watchdog(int rank, int world, std::chrono::milliseconds limit) : rank_(rank), world_(world), limit_(limit) {
    thread_ = std::thread([this] { run(); });
  }
  ~Watchdog() {
    {
      std::lock_guard lock(mutex_);
      closing_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }
  void arm(std::int64_t step) {
    std::lock_guard lock(mutex_);
    step_ = step;
    since_ = Clock::now();
    armed_ = true;
  }
  void disarm() {
    std::lock_guard lock(mutex_);
    armed_ = false;
  }

 private:
  void run() {
    std::unique_lock lock(mutex_);
    while (!closing_) {
      wake_.wait_for(lock, std::chrono::milliseconds(200));
      if (armed_ && Clock::now() - since_ > limit_) {
        std::string others;
        for (int r = 0; r < world_; ++r)
          if (r != rank_) others += (others.empty() ? "" : ", ") + std::to_string(r);
        std::fprintf(stderr,
                     "tandem-learner: rank %d: the gradient all-reduce of step %lld has not completed in %.0f s: "
                     "other rank(s) %s died or hang; exiting\n",
                     rank_, static_cast<long long>(step_) + 1, std::chrono::duration<double>(limit_).count(),
                     others.c_str());
        std::fflush(stderr);
        std::_Exit(1);
      }
    }
  }
  int rank_, world_;
  std::chrono::milliseconds limit_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool closing_ = false, armed_ = false;
  std::int64_t step_ = 0;
  Clock::time_point since_{};
  std::thread thread_;
};

}  // namespace

// The agreed stop vote, read without stalling the host on the device. On the CPU the reduced vote is
// plain memory, read after each step. On a GPU reading it would make every step wait for the
// device: instead each step's vote is copied to pinned memory on the stream, behind its all-reduce,
// and the vote of kVoteLag steps ago is read, its copy long finished. Every rank reads with the same
// lag, so every rank still stops after the same step: kVoteLag steps after the vote.
class LaggedVote {
 public:
  static constexpr std::int64_t kVoteLag = 2;

  bool read(const at::Tensor& vote) {
#ifdef TANDEM_TORCH_CUDA
    if (vote.is_cuda()) {
      if (slots_.empty()) {
        for (std::int64_t i = 0; i <= kVoteLag; ++i) {
          slots_.push_back(torch::zeros({1}, torch::TensorOptions().dtype(torch::kFloat).pinned_memory(true)));
          copied_.emplace_back(cudaEventDisableTiming);
        }
      }
      const auto ring = static_cast<std::int64_t>(slots_.size());
      const auto slot = static_cast<std::size_t>(steps_ % ring);
      slots_[slot].copy_(vote.view({1}), /*non_blocking=*/true);
      copied_[slot].record(at::cuda::getCurrentCUDAStream());
      if (++steps_ <= kVoteLag) return false;
      const auto old = static_cast<std::size_t>((steps_ - 1 - kVoteLag) % ring);
      copied_[old].synchronize();  // recorded kVoteLag steps ago: done
      return slots_[old].data_ptr<float>()[0] > 0.0f;
    }
#endif
    return vote.item<float>() > 0.0f;
  }

 private:
  std::int64_t steps_ = 0;
#ifdef TANDEM_TORCH_CUDA
  std::vector<at::Tensor> slots_;
  std::vector<at::cuda::CUDAEvent> copied_;
#endif
};

struct GradSync::Local {
  int rank = 0;
  std::unique_ptr<Watchdog> watchdog;
  LaggedVote vote;
};

GradSync::GradSync(const FlatParams& flat, std::vector<at::Tensor> params, Communicator& comm, const RankInfo& rank,
                   GradSyncOptions options)
    : state_(std::make_shared<State>()) {
  State& s = *state_;
  s.comm = &comm;
  s.world = rank.world_size;
  s.params = std::move(params);
  if (s.params.empty()) fail("data-parallel training: the model has no trainable parameter to synchronise");
  const at::Device device = s.params[0].device();
  std::int64_t numel = 0;
  for (const at::Tensor& p : s.params) {
    if (p.scalar_type() != at::kFloat || p.device() != device)
      fail(
          "data-parallel training needs float32 parameters on one device; parameter {} is {} on {}: convert "
          "the model",
          &p - s.params.data(), c10::toString(p.scalar_type()), p.device().str());
    numel += p.numel();
  }
  torch::NoGradGuard no_grad;
  s.grads = comm.gradient_buffer(numel + 1, device);
  s.agreed = torch::zeros({1}, s.grads.options());
  s.vote_host = torch::zeros({1}, torch::TensorOptions().dtype(torch::kFloat).pinned_memory(device.is_cuda()));

  std::vector<std::int64_t> offset(s.params.size());
  std::int64_t at = 0;
  for (std::size_t i = 0; i < s.params.size(); ++i) {
    at::Tensor& p = s.params[i];
    offset[i] = at;
    at::Tensor view = s.grads.narrow(0, at, p.numel()).view(p.sizes());
    if (p.grad().defined()) view.copy_(p.grad());
    p.mutable_grad() = view;
    at += p.numel();
  }

  // Buckets, walking the parameters backwards.
  const auto limit = [&](bool first) {
    return static_cast<std::int64_t>((first ? options.bucket_first_mb : options.bucket_mb) * 1024 * 1024 / 4);
  };
  s.bucket_of.assign(s.params.size(), 0);
  std::int64_t hi = numel + 1, size = 0;
  std::vector<std::size_t> members;
  auto close = [&](std::int64_t lo) {
    State::Bucket b;
    b.view = s.grads.narrow(0, lo, hi - lo);
    b.params = std::move(members);
    s.buckets.push_back(std::move(b));
    members.clear();
    hi = lo;
    size = 0;
  };
  for (std::size_t k = s.params.size(); k-- > 0;) {
    members.push_back(k);
    s.bucket_of[k] = s.buckets.size();
    size += s.params[k].numel();
    if (size >= limit(s.buckets.empty()) || k == 0) close(offset[k]);
  }

  hook_accumulators();

  // Buffers (BatchNorm statistics): the flat bytes that are not trainable parameters. The layout puts
  // parameters before buffers within each dtype group, so one range from the first buffer to the end
  // covers them all (and at most some non-float parameters, which are equal on every rank anyway).
  std::uint64_t first_buffer = flat.bytes();
  for (std::size_t i = 0; i < flat.table().size(); ++i)
    if (!flat.tensors()[i].requires_grad()) first_buffer = std::min(first_buffer, flat.table()[i].offset);
  if (first_buffer < flat.bytes())
    s.buffers = flat.buffer().narrow(0, static_cast<std::int64_t>(first_buffer),
                                     static_cast<std::int64_t>(flat.bytes() - first_buffer));
  for (auto& b : s.buckets) b.pending = b.params.size();

  s.flat_bytes = flat.buffer();
  local_ = std::make_unique<Local>();
  local_->rank = rank.rank;
  local_->watchdog = std::make_unique<Watchdog>(rank.rank, rank.world_size, options.timeout + std::chrono::seconds(5));
}

// The hooks hold the state weakly: once it is gone with this object, they do nothing.
GradSync::~GradSync() = default;

void GradSync::hook_accumulators() {
  State& s = *state_;
  for (std::size_t i = 0; i < s.params.size(); ++i) {
    auto acc = torch::autograd::impl::grad_accumulator(s.params[i]);
    if (!acc) fail("data-parallel training: parameter {} is not a leaf that requires grad", i);
    std::weak_ptr<State> weak = state_;
    acc->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
        [weak, i](const torch::autograd::variable_list& outputs, const torch::autograd::variable_list&) {
      if (auto st = weak.lock()) st->ready(i);
      return outputs;
    }));
    s.accumulators.push_back(std::move(acc));
  }
}

void GradSync::rehook() {
  State& s = *state_;
  std::vector<const torch::autograd::Node*> old;
  for (const auto& a : s.accumulators) old.push_back(a.get());
  s.accumulators.clear();  // the last owners: the parameters hold their accumulators weakly
  hook_accumulators();
  for (std::size_t i = 0; i < old.size(); ++i)
    if (s.accumulators[i].get() == old[i])  // still alive: it now carries this sync's hook twice
      throw std::logic_error("GradSync::rehook: an autograd graph still holds a parameter's AccumulateGrad");
}

std::size_t GradSync::bucket_count() const { return state_->buckets.size(); }
const at::Tensor& GradSync::grad_buffer() const { return state_->grads; }

void GradSync::vote_stop(bool stop) { state_->vote_host.data_ptr<float>()[0] = stop ? 1.0f : 0.0f; }

bool GradSync::capturable() const { return state_->comm->capturable(); }

void GradSync::broadcast_from_rank0(const std::vector<at::Tensor>& extra) {
  // Parameters and buffers are views of the flat bytes: one broadcast moves them all.
  torch::NoGradGuard no_grad;
  State& s = *state_;
  try {
    s.comm->broadcast(s.flat_bytes, 0);
    for (const at::Tensor& t : extra) s.comm->broadcast(t, 0);
  } catch (const UserError& e) {
    fail("rank {}: broadcasting rank 0's weights failed: {}", local_->rank, e.what());
  }
}

std::int64_t GradSync::agree(std::int64_t value) {
  at::Tensor t = torch::full({1}, value, torch::TensorOptions().dtype(torch::kInt64).device(state_->grads.device()));
  state_->comm->broadcast(t, 0);
  return t.cpu().item<std::int64_t>();
}

bool GradSync::any(bool flag) {
  at::Tensor t = torch::full({1}, flag ? 1.0f : 0.0f, state_->grads.options());
  try {
    state_->comm->all_reduce_sum(t, 1.0, {})->wait();
  } catch (const UserError& e) {
    fail("rank {}: agreeing with the other ranks whether to stop failed: {}", local_->rank, e.what());
  }
  return t.cpu().item<float>() > 0.0f;
}

void GradSync::finish(std::int64_t step) {
  finish_on_device(step);
  stop_agreed_ = local_->vote.read(state_->agreed);
}

void GradSync::after_replay() {
  state_->comm->watch_replay();
  stop_agreed_ = local_->vote.read(state_->agreed);
}

void GradSync::finish_on_device(std::int64_t step) {
  State& s = *state_;
  torch::NoGradGuard no_grad;
  const auto backward_done = Clock::now();
  const double issued_during_backward_s = s.issuing_s;
  local_->watchdog->arm(step);
  try {
    for (std::size_t i = 0; i < s.params.size(); ++i)
      if (!s.params[i].grad().defined() || !s.params[i].grad().storage().is_alias_of(s.grads.storage()))
        fail("data-parallel training: parameter {}'s gradient was replaced (zero it in place, never set it to None)",
             i);
    s.launch_ready(/*all=*/true);  // parameters backward did not reach keep zero gradients
    for (auto& b : s.buckets) {
      b.work->wait();
      b.work.reset();
    }
    times_.allreduce_s = seconds_since(s.first_launch);
  } catch (const UserError& e) {
    local_->watchdog->disarm();
    s.comm->abort();
    std::string others;
    for (int r = 0; r < s.world; ++r)
      if (r != local_->rank) others += (others.empty() ? "" : ", ") + std::to_string(r);
    fail("rank {}: step {}: gradient all-reduce with other rank(s) {} failed (one died or hangs): {}", local_->rank,
         step + 1, others, e.what());
  }
  local_->watchdog->disarm();
  times_.exposed_s = issued_during_backward_s + seconds_since(backward_done);
  s.issuing_s = 0;
  at::Tensor vote = s.grads.narrow(0, s.grads.numel() - 1, 1);
  s.agreed.copy_(vote);  // read on the host by finish() or after_replay(), behind the step's work
  vote.zero_();
  s.next_launch = 0;
  for (auto& b : s.buckets) b.pending = b.params.size();
}

}  // namespace tandem::ddp
