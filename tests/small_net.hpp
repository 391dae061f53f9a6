// The small model of the weight-sharing tests (flat parameters, followers): Linear(in, hidden) ->
// BatchNorm1d -> ReLU -> Linear(hidden, out), so it has buffers (the running statistics) as well as
// parameters, and `hidden` changes its layout.
#pragma once

#include <torch/nn.h>

namespace tandem::test {

struct SmallNet : torch::nn::Module {
  explicit SmallNet(int hidden = 16, int in = 8, int out = 2) {
    fc1 = register_module("fc1", torch::nn::Linear(in, hidden));
    bn = register_module("bn", torch::nn::BatchNorm1d(hidden));
    fc2 = register_module("fc2", torch::nn::Linear(hidden, out));
  }
  torch::Tensor forward(const torch::Tensor& x) { return fc2(torch::relu(bn(fc1(x)))); }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
  torch::nn::BatchNorm1d bn{nullptr};
};

}  // namespace tandem::test
