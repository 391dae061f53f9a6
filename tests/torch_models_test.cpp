#include <torch/nn/functional/linear.h>
#include <torch/script.h>
#include <torch/types.h>
#include <torch/utils.h>
// After LibTorch: Debian's c10 pulls in glog, whose CHECK must not replace doctest's.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include "common/error.hpp"
#include "common/torch/models.hpp"
#include "tests/harness.hpp"
#include "tests/script_models.hpp"

using tandem::Model;
using tandem::ModelSpec;

namespace {
using tandem::test::error_of;

// A temporary file path removed at scope exit.
struct TempPath {
  std::string path = fmt::format("/tmp/{}.pt", tandem::test::unique_name("tandem-model"));
  ~TempPath() { std::remove(path.c_str()); }
};


}  // namespace

TEST_CASE("models: every built-in model maps a batch to logits of [B, num_classes]") {
  struct Row {
    const char* name;
    std::int64_t c, h, w, classes;
  };
  const Row rows[] = {
      {"mlp", 1, 28, 28, 10},      {"cnn", 1, 28, 28, 10},           {"cnn", 3, 32, 32, 10},
      {"resnet18", 3, 32, 32, 10}, {"actor_critic_mlp", 4, 1, 1, 2},
  };
  for (const Row& r : rows) {
    CAPTURE(r.name);
    Model m = Model::create({.name = r.name, .channels = r.c, .height = r.h, .width = r.w, .num_classes = r.classes});
    CHECK(m.is_training());
    CHECK(m.nn_module() != nullptr);
    CHECK(m.jit_module() == nullptr);
    torch::Tensor x = torch::randn({5, r.c, r.h, r.w});
    torch::Tensor logits = m.forward(x);
    CHECK(logits.sizes() == torch::IntArrayRef({5, r.classes}));
    CHECK(m.num_parameters() > 0);
  }
}

TEST_CASE("models: the actor-critic mlp has a value head beside its policy logits") {
  Model m = Model::create({.name = "actor_critic_mlp", .channels = 8, .height = 1, .width = 1, .num_classes = 3});
  auto heads = m.forward_heads(torch::randn({7, 8, 1, 1}));
  REQUIRE(heads.size() == 2);
  CHECK(heads[0].sizes() == torch::IntArrayRef({7, 3}));
  CHECK(heads[1].sizes() == torch::IntArrayRef({7}));
}

TEST_CASE("models: the actor-critic mlp's outputs and gradients equal LibTorch's own linear layers") {
  Model m = Model::create({.name = "actor_critic_mlp", .channels = 4, .height = 1, .width = 1, .num_classes = 2});
  std::map<std::string, torch::Tensor> p;
  for (const auto& [name, t] : m.named_parameters()) p[name] = t;
  const torch::Tensor x = torch::randn({37, 4, 1, 1});
  auto lin = [&](const std::string& l, const torch::Tensor& in) {
    return torch::linear(in, p[l + ".weight"], p[l + ".bias"]);
  };
  const torch::Tensor f = x.flatten(1);
  const torch::Tensor logits = lin("policy", torch::tanh(lin("fc2", torch::tanh(lin("fc1", f)))));
  const torch::Tensor value = lin("value", torch::tanh(lin("vfc2", torch::tanh(lin("vfc1", f))))).squeeze(-1);
  const auto heads = m.forward_heads(x);
  CHECK(torch::allclose(heads[0], logits, 1e-5, 1e-6));
  CHECK(torch::allclose(heads[1], value, 1e-5, 1e-6));
  auto grads = [&](const torch::Tensor& loss) {
    for (auto& [name, t] : p) t.mutable_grad() = torch::Tensor();
    loss.backward();
    std::map<std::string, torch::Tensor> g;
    for (auto& [name, t] : p) g[name] = t.grad().clone();
    return g;
  };
  const auto theirs = grads((logits.pow(2).sum() + value.sin().sum()));
  const auto ours = grads((heads[0].pow(2).sum() + heads[1].sin().sum()));
  REQUIRE(ours.size() == 12);
  for (const auto& [name, g] : theirs) {
    const std::string& parameter = name;  // CAPTURE's lambda: clang before 16 cannot capture a structured binding
    CAPTURE(parameter);
    CHECK(torch::allclose(ours.at(name), g, 1e-4, 1e-6));
  }
}

TEST_CASE("models: a shared-trunk actor-critic mlp puts both heads on fc1 and fc2, model.hidden units wide") {
  Model m = Model::create({.name = "actor_critic_mlp",
                           .channels = 5,
                           .height = 1,
                           .width = 1,
                           .num_classes = 2,
                           .hidden = 32,
                           .shared_trunk = true});
  std::map<std::string, torch::Tensor> p;
  for (const auto& [name, t] : m.named_parameters()) p[name] = t;
  CHECK(p.size() == 8);  // fc1, fc2, policy and value: weights and biases, no vfc1 or vfc2
  CHECK(p["fc1.weight"].sizes() == torch::IntArrayRef({32, 5}));
  CHECK(p["fc2.weight"].sizes() == torch::IntArrayRef({32, 32}));
  CHECK(p["value.weight"].sizes() == torch::IntArrayRef({1, 32}));
  const torch::Tensor x = torch::randn({9, 5, 1, 1});
  const torch::Tensor h = torch::tanh(torch::linear(
      torch::tanh(torch::linear(x.flatten(1), p["fc1.weight"], p["fc1.bias"])), p["fc2.weight"], p["fc2.bias"]));
  const auto heads = m.forward_heads(x);
  CHECK(torch::allclose(heads[0], torch::linear(h, p["policy.weight"], p["policy.bias"]), 1e-5, 1e-6));
  CHECK(torch::allclose(heads[1], torch::linear(h, p["value.weight"], p["value.bias"]).squeeze(-1), 1e-5, 1e-6));
}

TEST_CASE("models: resnet18 has ResNet-18's parameter count and torchvision's names") {
  Model m = Model::create({.name = "resnet18", .channels = 3, .height = 32, .width = 32, .num_classes = 10});
  CHECK(m.num_parameters() == 11173962);  // torchvision resnet18(num_classes=10) with a 3x3 stem
  bool has_downsample = false;
  for (const auto& [name, t] : m.named_parameters()) has_downsample |= name == "layer2.0.downsample.0.weight";
  CHECK(has_downsample);
  // BatchNorm buffers come along: running statistics and the batch counter.
  std::int64_t buffers = 0;
  for (const auto& [name, t] : m.named_buffers()) buffers += name.find("running_mean") != std::string::npos;
  CHECK(buffers == 20);
}

TEST_CASE("models: named parameters are the module's own tensors, not copies") {
  Model m = Model::create({.name = "cnn"});
  auto named = m.named_parameters();
  auto own = m.nn_module()->parameters();
  REQUIRE(named.size() == own.size());
  for (std::size_t i = 0; i < own.size(); ++i)
    CHECK(named[i].second.unsafeGetTensorImpl() == own[i].unsafeGetTensorImpl());
  // Re-homing through the list (what flat parameters do) changes what forward computes.
  m.eval();
  torch::NoGradGuard no_grad;
  torch::Tensor x = torch::randn({2, 1, 28, 28});
  torch::Tensor before = m.forward(x);
  for (auto& [name, t] : named) t.zero_();
  CHECK_FALSE(torch::equal(before, m.forward(x)));
}

TEST_CASE("models: the same seed builds the same weights") {
  Model a = Model::create({.name = "cnn", .seed = 7});
  Model b = Model::create({.name = "cnn", .seed = 7});
  Model c = Model::create({.name = "cnn", .seed = 8});
  auto pa = a.parameters(), pb = b.parameters(), pc = c.parameters();
  CHECK(torch::equal(pa[0], pb[0]));
  CHECK_FALSE(torch::equal(pa[0], pc[0]));
}

TEST_CASE("models: a TorchScript file loads behind the same interface and trains") {
  TempPath file;
  tandem::test::save_linear_torchscript(file.path, 784, 10);
  Model m = Model::create({.name = file.path});
  REQUIRE(m.jit_module() != nullptr);
  CHECK(m.nn_module() == nullptr);
  auto named = m.named_parameters();
  REQUIRE(named.size() == 2);
  CHECK(named[0].first == "weight");
  torch::Tensor x = torch::randn({4, 1, 28, 28});
  torch::Tensor expected = torch::nn::functional::linear(x.flatten(1), named[0].second, named[1].second);
  CHECK(torch::allclose(m.forward(x), expected));
  // Gradients reach the file's parameters.
  m.forward(x).sum().backward();
  CHECK(named[0].second.grad().defined());
  m.eval();
  CHECK_FALSE(m.is_training());
}

TEST_CASE("models: unknown names, bad files and misfitting shapes are one-line errors naming the model") {
  CHECK(error_of([] { Model::create({.name = "vgg"}); }).find("'vgg' is neither a built-in (mlp, cnn") !=
        std::string::npos);
  CHECK(error_of([] { Model::create({.name = "cnn", .height = 30}); }).find("divisible by 4") != std::string::npos);
  CHECK(error_of([] { Model::create({.name = "mlp", .num_classes = 0}); }).find("at least 1") != std::string::npos);

  TempPath garbage;
  { std::ofstream(garbage.path) << "not a zip archive"; }
  std::string e = error_of([&] { Model::create({.name = garbage.path}); });
  CHECK(e.find(garbage.path) != std::string::npos);
  CHECK(e.find("not a TorchScript module") != std::string::npos);
  CHECK(e.find('\n') == std::string::npos);

  TempPath linear;
  tandem::test::save_linear_torchscript(linear.path, 784, 10);
  e = error_of([&] { Model::create({.name = linear.path, .num_classes = 5}); });
  CHECK(e.find("returns logits of shape 2x10 for 2 samples, expected [2, 5]") != std::string::npos);
  e = error_of([&] { Model::create({.name = linear.path, .channels = 3, .height = 32, .width = 32}); });
  CHECK(e.find("cannot take input [B, 3, 32, 32]") != std::string::npos);
  CHECK(e.find('\n') == std::string::npos);
}
