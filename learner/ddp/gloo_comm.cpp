// Gloo backend of comm.hpp: LibTorch's c10d::ProcessGroupGloo (Debian's libtorch 1.13 builds it in).
#ifndef USE_C10D_GLOO
#define USE_C10D_GLOO 1  // ProcessGroupGloo.hpp declares nothing without it
#endif
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include <cstdlib>

#include "common/error.hpp"
#include "learner/ddp/comm.hpp"
#include "learner/ddp/rank_env.hpp"

namespace tandem::ddp {
namespace {

class GlooCommunicator final : public Communicator {
 public:
  GlooCommunicator(c10::intrusive_ptr<c10d::ProcessGroupGloo> group, std::chrono::milliseconds timeout)
      : group_(std::move(group)), timeout_(timeout) {}
  ~GlooCommunicator() override {
    // ~ProcessGroupGloo drains its queue: after another rank failed that can block once per op in flight,
    // each up to the timeout. A broken group is left to the process's exit instead.
    if (broken_) (void)group_.release();
  }

  std::unique_ptr<Pending> all_reduce_sum(const at::Tensor& t, double scale, const at::Tensor& rank0_bytes) override {
    if (scale != 1.0) t.mul_(scale);
    std::vector<at::Tensor> tensors{t};
    std::vector<c10::intrusive_ptr<c10d::Work>> works{group_->allreduce(tensors)};
    if (rank0_bytes.defined()) works.push_back(start_broadcast(rank0_bytes, 0));
    return std::make_unique<Tracked>(*this, std::move(works), timeout_);
  }
  void broadcast(const at::Tensor& t, int root) override {
    Tracked(*this, {start_broadcast(t, root)}, timeout_).wait();
  }
  void abort() override { broken_ = true; }
  const char* backend() const override { return "gloo"; }

 private:
  c10::intrusive_ptr<c10d::Work> start_broadcast(const at::Tensor& t, int root) {
    std::vector<at::Tensor> tensors{t};
    c10d::BroadcastOptions opts;
    opts.rootRank = root;
    return group_->broadcast(tensors, opts);
  }

  // Gloo's works of one op, waited in issue order; marks the group broken when one fails, so the
  // destructor does not wait on it.
  class Tracked final : public Pending {
   public:
    Tracked(GlooCommunicator& owner, std::vector<c10::intrusive_ptr<c10d::Work>> works,
            std::chrono::milliseconds timeout)
        : owner_(owner), works_(std::move(works)), timeout_(timeout) {}
    void wait() override {
      try {
        for (auto& work : works_) work->wait(timeout_);
      } catch (const std::exception& e) {
        owner_.broken_ = true;
        fail("Gloo collective failed: {}", first_line(e));
      }
    }

   private:
    GlooCommunicator& owner_;
    std::vector<c10::intrusive_ptr<c10d::Work>> works_;
    std::chrono::milliseconds timeout_;
  };

  c10::intrusive_ptr<c10d::ProcessGroupGloo> group_;
  std::chrono::milliseconds timeout_;
  std::atomic<bool> broken_{false};
};

bool loopback(const std::string& host) { return host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1"; }

}  // namespace

std::unique_ptr<Communicator> make_gloo(const c10::intrusive_ptr<c10d::Store>& store, const RankInfo& rank,
                                        std::chrono::milliseconds timeout) {
  auto opts = c10d::ProcessGroupGloo::Options::create(timeout);
  try {
    // GLOO_SOCKET_IFNAME (torch's variable) picks the interface; ranks on one machine talking to a
    // loopback master stay on loopback; otherwise Gloo resolves this host's name.
    if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname && *ifname)
      opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
    else if (loopback(rank.master_addr))
      opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
    else opts->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
    auto prefixed = c10::make_intrusive<c10d::PrefixStore>("gloo", store);
    auto group = c10::make_intrusive<c10d::ProcessGroupGloo>(prefixed, rank.rank, rank.world_size, opts);
    return std::make_unique<GlooCommunicator>(std::move(group), timeout);
  } catch (const UserError&) {
    throw;
  } catch (const std::exception& e) {
    fail(
        "rank {}: Gloo could not connect the {} ranks ({}): check that the hosts reach each other, or set "
        "GLOO_SOCKET_IFNAME to the interface to use",
        rank.rank, rank.world_size, first_line(e));
  }
}

}  // namespace tandem::ddp
