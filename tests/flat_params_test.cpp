// Flat parameters: views share one buffer, training updates it in place, the signature tracks layout.
// LibTorch first: Debian's build pulls glog, whose CHECK macro must be overridden by doctest's.
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>
#include <torch/types.h>
#include <torch/utils.h>
// (keep this order)
#include <doctest/doctest.h>

#include "common/torch/flat_params.hpp"
#include "tests/harness.hpp"
#include "tests/small_net.hpp"

using namespace tandem;

namespace {

bool inside(const at::Tensor& t, const at::Tensor& flat) {
  auto* p = static_cast<const std::byte*>(t.data_ptr());
  auto* b = static_cast<const std::byte*>(flat.data_ptr());
  return p >= b && p + t.numel() * t.element_size() <= b + flat.numel();
}

}  // namespace

TEST_CASE("flat params: every parameter and buffer is a view of one buffer and keeps its values") {
  torch::manual_seed(0);
  test::SmallNet net;
  auto before = net.fc1->weight.clone();
  auto mean_before = net.bn->running_var.clone();
  FlatParams flat = FlatParams::flatten(net);
  const at::Tensor& buf = flat.buffer();
  for (auto& p : net.parameters()) CHECK(inside(p, buf));
  for (auto& b : net.buffers()) CHECK(inside(b, buf));
  CHECK(torch::equal(net.fc1->weight, before));
  CHECK(torch::equal(net.bn->running_var, mean_before));
  CHECK(net.fc1->weight.requires_grad());
  CHECK(flat.table().size() == 9);  // 6 parameters + BatchNorm's mean, var and counter
}

TEST_CASE("flat params: float32 tensors come first, each aligned, then the int64 counter") {
  test::SmallNet net;
  FlatParams flat = FlatParams::flatten(net);
  const auto& table = flat.table();
  REQUIRE(table.back().name == "bn.num_batches_tracked");
  CHECK((table.back().dtype == c10::ScalarType::Long));
  for (const auto& t : table) CHECK(t.offset % kFlatAlignment == 0);
  CHECK(flat.float32_bytes() <= table.back().offset);
  CHECK(flat.float32_bytes() % kFlatAlignment == 0);
}

TEST_CASE("flat params: an optimizer step updates the flat buffer in place") {
  torch::manual_seed(1);
  test::SmallNet net;
  FlatParams flat = FlatParams::flatten(net);
  torch::optim::SGD opt(net.parameters(), torch::optim::SGDOptions(0.1));
  auto snapshot = flat.buffer().clone();
  auto loss = net.forward(torch::randn({4, 8})).pow(2).sum();
  loss.backward();
  CHECK(net.fc1->weight.grad().defined());
  opt.step();
  CHECK_FALSE(torch::equal(flat.buffer(), snapshot));
  // The bytes that changed are the parameters' (and the BatchNorm statistics' from forward).
  const auto& fc1 = flat.table().front();
  auto fc1_bytes = flat.buffer().narrow(0, fc1.offset, fc1.bytes);
  CHECK_FALSE(torch::equal(fc1_bytes, snapshot.narrow(0, fc1.offset, fc1.bytes)));
  CHECK(inside(net.fc1->weight, flat.buffer()));
}

TEST_CASE("flat params: the signature changes with a shape, a dtype or a name, and only then") {
  test::SmallNet a, b;
  auto sa = FlatParams::flatten(a).signature();
  CHECK(FlatParams::flatten(b).signature() == sa);  // different values, same layout
  test::SmallNet wider(32);
  CHECK(FlatParams::flatten(wider).signature() != sa);
  test::SmallNet c;
  c.to(torch::kFloat64);
  CHECK(FlatParams::flatten(c).signature() != sa);
  struct Renamed : torch::nn::Module {
    Renamed() {
      register_module("first", torch::nn::Linear(8, 16));
      register_module("bn", torch::nn::BatchNorm1d(16));
      register_module("fc2", torch::nn::Linear(16, 2));
    }
  } renamed;
  CHECK(FlatParams::flatten(renamed).signature() != sa);
  CHECK(FlatParams::flatten(a).signature_hex().size() == 16);
}

TEST_CASE("flat params: rebind points the model at other bytes without copying") {
  torch::manual_seed(2);
  test::SmallNet src, dst;
  FlatParams fs = FlatParams::flatten(src), fd = FlatParams::flatten(dst);
  fd.rebind(fs.buffer());
  auto x = torch::randn({4, 8});
  src.eval();
  dst.eval();
  CHECK(torch::equal(src.forward(x), dst.forward(x)));
  CHECK(dst.fc1->weight.data_ptr() == src.fc1->weight.data_ptr());
}

TEST_CASE("flat params: tied weights are placed once") {
  struct Tied : torch::nn::Module {
    Tied() {
      auto w = register_parameter("w", torch::randn({4, 4}));
      register_parameter("w_again", w);
    }
  } tied;
  FlatParams flat = FlatParams::flatten(tied);
  CHECK(flat.table().size() == 1);
}

TEST_CASE("flat params: a tensor rebound after flattening is seen and adopted back with its values") {
  test::SmallNet net;
  FlatParams flat = FlatParams::flatten(net);
  const std::size_t i = 0;  // fc1.weight: float32 first, in module order
  REQUIRE(flat.table()[i].name == "fc1.weight");
  CHECK(flat.in_place(i));
  net.fc1->weight.set_data(torch::full_like(net.fc1->weight, 3.0));  // Python's `p.data = t`
  CHECK_FALSE(flat.in_place(i));
  CHECK(flat.adopt_rebound(FlatParams::Values::copy) == 1);
  CHECK(flat.in_place(i));
  CHECK(inside(net.fc1->weight, flat.buffer()));
  CHECK(torch::equal(net.fc1->weight, torch::full_like(net.fc1->weight, 3.0)));
  net.fc2->bias.set_data(torch::full_like(net.fc2->bias, 9.0));
  CHECK(flat.adopt_rebound(FlatParams::Values::keep) == 1);  // points back, keeping the buffer's values
  CHECK(inside(net.fc2->bias, flat.buffer()));
  CHECK_FALSE(torch::equal(net.fc2->bias, torch::full_like(net.fc2->bias, 9.0)));
}

TEST_CASE("flat params: a tensor converted to another dtype after flattening is refused by name") {
  test::SmallNet net;
  FlatParams flat = FlatParams::flatten(net);
  net.fc1->weight.set_data(net.fc1->weight.to(torch::kDouble));
  const std::string message = test::error_of([&] { (void)flat.adopt_rebound(FlatParams::Values::copy); });
  CHECK(message.find("model tensor 'fc1.weight' no longer matches") != std::string::npos);
  CHECK(message.find("now float64 [16, 8] on cpu, it was float32 [16, 8] on cpu") != std::string::npos);
}

TEST_CASE("flat params: a meta or sparse tensor is refused by name before anything is allocated") {
  std::vector<std::pair<std::string, at::Tensor>> meta{{"w", torch::empty({4, 4}, torch::Device("meta"))}};
  CHECK(test::error_of([&] { (void)FlatParams::flatten(meta); }).find("model tensor 'w' is on the meta device") !=
        std::string::npos);
  std::vector<std::pair<std::string, at::Tensor>> sparse{{"s", torch::eye(3).to_sparse()}};
  CHECK(test::error_of([&] { (void)FlatParams::flatten(sparse); }).find("model tensor 's' has layout") !=
        std::string::npos);
}
