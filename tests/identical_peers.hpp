// Stand-ins for data-parallel peers in one process (tests of learner/ddp/grad_sync): a communicator
// whose every peer holds the same tensor (the sum over `world` equal ranks is world x the tensor),
// recording each launch, and a model replica with flat parameters and a fixed loss.
#pragma once

#include <torch/torch.h>

#include <cstddef>
#include <memory>
#include <vector>

#include "common/torch/flat_params.hpp"
#include "common/torch/models.hpp"
#include "learner/ddp/comm.hpp"

namespace tandem::test {

struct Done final : ddp::Pending {
  void wait() override {}
};

struct IdenticalPeers final : ddp::Communicator {
  int world = 2;
  bool in_backward = false;
  struct Launch {
    const void* data;
    std::int64_t numel;
    bool during_backward;
    const std::byte* carried = nullptr;  // rank 0's buffers riding along (none: nullptr, 0)
    std::size_t carried_bytes = 0;
  };
  std::vector<Launch> launches;
  std::unique_ptr<ddp::Pending> all_reduce_sum(const at::Tensor& t, double scale,
                                               const at::Tensor& rank0_bytes) override {
    Launch l{t.data_ptr(), t.numel(), in_backward};
    if (rank0_bytes.defined()) {
      l.carried = static_cast<const std::byte*>(rank0_bytes.data_ptr());
      l.carried_bytes = rank0_bytes.nbytes();
    }
    launches.push_back(l);
    t.mul_(scale).mul_(world);
    return std::make_unique<Done>();
  }
  void broadcast(const at::Tensor&, int) override {}
  void abort() override {}
  const char* backend() const override { return "identical peers"; }
};

struct Replica {
  explicit Replica(const char* model_name = "mlp", const torch::Device& device = torch::kCPU)
      : model(Model::create({.name = model_name, .seed = 11})) {
    model.to(device);
    flat = FlatParams::flatten(model);
  }
  Model model;
  FlatParams flat;
  std::vector<at::Tensor> params() {
    std::vector<at::Tensor> out;
    for (auto& [name, p] : model.named_parameters()) out.push_back(p);
    return out;
  }
  torch::Tensor loss() {
    torch::manual_seed(5);
    const torch::Tensor x = torch::randn({8, 1, 28, 28}).to(model.device());
    const torch::Tensor y = torch::randint(0, 10, {8}, torch::kInt64).to(model.device());
    return torch::nn::functional::cross_entropy(model.forward(x), y);
  }
};

}  // namespace tandem::test
