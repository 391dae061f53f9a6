#include "common/torch/models.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <c10/core/InferenceMode.h>
#include <torch/autograd.h>
#include <torch/nn.h>
#include <torch/script.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <map>

#include "common/error.hpp"
#include "common/settings/data.hpp"
#include "common/torch/fused_bn_relu_pool.hpp"

namespace tandem {
namespace {

namespace nn = torch::nn;
using torch::Tensor;

// Every built-in network: a torch::nn::Module whose heads() returns {logits, further heads...}.
struct Net : nn::Module {
  virtual std::vector<Tensor> heads(const Tensor& x) = 0;
};

nn::Conv2d conv3x3(std::int64_t in, std::int64_t out, std::int64_t stride = 1) {
  return nn::Conv2d(nn::Conv2dOptions(in, out, 3).stride(stride).padding(1).bias(false));
}

// A linear layer through oneDNN: Debian's LibTorch multiplies float matrices with the reference BLAS
// (BLAS_INFO=generic), ~8x slower than oneDNN at the 64x64 layers of an RL policy and ~15x at the
// cnn's 1568x128 fc1, whose forward and backward took 33 of the cnn's 56 ms step at batch 128
// (and streamed memory the ranks of a node then fought over). Convolutions already go through
// oneDNN in LibTorch. Dense in, dense out; the backward pass is two more oneDNN products.
struct DnnlLinear : torch::autograd::Function<DnnlLinear> {
  static Tensor product(const Tensor& a, const Tensor& b_rows, const c10::optional<Tensor>& bias) {  // a b_rows^T
    return at::mkldnn_linear(a.contiguous().to_mkldnn(), b_rows.contiguous(), bias).to_dense();
  }
  static Tensor forward(torch::autograd::AutogradContext* ctx, const Tensor& x, const Tensor& w, const Tensor& b) {
    ctx->save_for_backward({x, w});
    return product(x, w, b);
  }
  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const Tensor& g = grads[0];
    const Tensor gx = ctx->needs_input_grad(0) ? product(g, saved[1].t(), c10::nullopt) : Tensor();
    return {gx, product(g.t(), saved[0].t(), c10::nullopt), g.sum(0)};
  }
};

// nn::Linear's forward, through oneDNN where it applies (2-D float input on a CPU with oneDNN).
Tensor linear(nn::Linear& l, const Tensor& x) {
  if (!at::hasMKLDNN() || x.dim() != 2 || !x.device().is_cpu() || x.scalar_type() != torch::kFloat32 ||
      x.size(0) == 0)
    return l->forward(x);
  if (!torch::GradMode::is_enabled() || c10::InferenceMode::is_enabled())
    return DnnlLinear::product(x, l->weight, l->bias);
  return DnnlLinear::apply(x, l->weight, l->bias);
}

struct Mlp : Net {
  nn::Linear fc1{nullptr}, fc2{nullptr}, fc3{nullptr};
  explicit Mlp(const ModelSpec& s) {
    const std::int64_t in = s.channels * s.height * s.width;
    fc1 = register_module("fc1", nn::Linear(in, 256));
    fc2 = register_module("fc2", nn::Linear(256, 256));
    fc3 = register_module("fc3", nn::Linear(256, s.num_classes));
  }
  std::vector<Tensor> heads(const Tensor& x) override {
    Tensor h = torch::relu(linear(fc1, x.flatten(1)));
    h = torch::relu(linear(fc2, h));
    return {linear(fc3, h)};
  }
};

// Two conv blocks (conv-BN-ReLU-maxpool) then one hidden layer. BatchNorm is what makes two epochs
// enough. Widths 16/32, not the usual 32/64: measured on the 2-core machine they train 2.3x faster
// per sample and reach 0.91 at two epochs all the same (docs/BENCHMARKS.md, "Fashion-MNIST recipe").
struct Cnn : Net {
  nn::Conv2d conv1{nullptr}, conv2{nullptr};
  nn::BatchNorm2d bn1{nullptr}, bn2{nullptr};
  nn::Linear fc1{nullptr}, fc2{nullptr};
  explicit Cnn(const ModelSpec& s) {
    if (s.height % 4 != 0 || s.width % 4 != 0)
      fail("model 'cnn' needs a height and width divisible by 4, got {}x{}: use 'mlp' or resize the data",
           s.height, s.width);
    conv1 = register_module("conv1", conv3x3(s.channels, 16));
    bn1 = register_module("bn1", nn::BatchNorm2d(16));
    conv2 = register_module("conv2", conv3x3(16, 32));
    bn2 = register_module("bn2", nn::BatchNorm2d(32));
    fc1 = register_module("fc1", nn::Linear(32 * (s.height / 4) * (s.width / 4), 128));
    fc2 = register_module("fc2", nn::Linear(128, s.num_classes));
  }
  std::vector<Tensor> heads(const Tensor& x) override {
    // On the CPU the activations go channels-last (NHWC): oneDNN's convolutions run natively in it
    // (NCHW is reordered to a blocked layout and back around every call), and the fused
    // BatchNorm-ReLU-pool needs it. A copy, even for one channel, where contiguous(ChannelsLast) would
    // keep NCHW strides that oneDNN does not take for channels-last. On the GPU the cnn keeps NCHW, as
    // its CUDA-graph figures were measured (docs/BENCHMARKS.md); channels-last there is unmeasured.
    const Tensor in = x.is_cuda() ? x : torch::empty_like(x, at::MemoryFormat::ChannelsLast).copy_(x);
    Tensor h = bn_relu_pool(bn1, conv1->forward(in));
    h = bn_relu_pool(bn2, conv2->forward(h));
    h = torch::relu(linear(fc1, h.flatten(1)));
    return {linear(fc2, h)};
  }
};

// torchvision's BasicBlock, with its parameter names (conv1, bn1, conv2, bn2, downsample.0/1), so
// checkpoints line up with the usual Python CIFAR ResNet-18.
struct BasicBlock : nn::Module {
  nn::Conv2d conv1{nullptr}, conv2{nullptr};
  nn::BatchNorm2d bn1{nullptr}, bn2{nullptr};
  nn::Sequential downsample{nullptr};
  BasicBlock(std::int64_t in, std::int64_t out, std::int64_t stride) {
    conv1 = register_module("conv1", conv3x3(in, out, stride));
    bn1 = register_module("bn1", nn::BatchNorm2d(out));
    conv2 = register_module("conv2", conv3x3(out, out));
    bn2 = register_module("bn2", nn::BatchNorm2d(out));
    if (stride != 1 || in != out)
      downsample = register_module("downsample",
          nn::Sequential(nn::Conv2d(nn::Conv2dOptions(in, out, 1).stride(stride).bias(false)), nn::BatchNorm2d(out)));
  }
  Tensor forward(const Tensor& x) {
    Tensor h = torch::relu(bn1->forward(conv1->forward(x)));
    h = bn2->forward(conv2->forward(h));
    return torch::relu(h + (downsample ? downsample->forward(x) : x));
  }
};

struct ResNet18 : Net {
  nn::Conv2d conv1{nullptr};
  nn::BatchNorm2d bn1{nullptr};
  std::vector<std::shared_ptr<BasicBlock>> blocks;
  nn::Linear fc{nullptr};
  explicit ResNet18(const ModelSpec& s) {
    conv1 = register_module("conv1", conv3x3(s.channels, 64));
    bn1 = register_module("bn1", nn::BatchNorm2d(64));
    std::int64_t in = 64;
    const std::int64_t widths[] = {64, 128, 256, 512};
    for (int layer = 0; layer < 4; ++layer) {
      auto seq = register_module(fmt::format("layer{}", layer + 1), nn::Sequential());
      for (int b = 0; b < 2; ++b) {
        auto block = std::make_shared<BasicBlock>(in, widths[layer], (layer > 0 && b == 0) ? 2 : 1);
        seq->push_back(block);
        blocks.push_back(block);
        in = widths[layer];
      }
    }
    fc = register_module("fc", nn::Linear(512, s.num_classes));
  }
  std::vector<Tensor> heads(const Tensor& x) override {
    // On the GPU the activations go channels-last (NHWC): cuDNN's tensor-core convolutions and
    // PyTorch's BatchNorm kernels run natively in it, and a captured step at batch 128 takes 4.9 ms
    // instead of 7.1 (bench/peers/resnet_layouts.py on an H200). Only the input is converted: the
    // weights stay NCHW in the flat parameters (checkpoints, the weight slab), and cuDNN converts them
    // on the fly, a few us per layer. Values are the same; summation orders, hence rounding, differ.
    const Tensor in = x.is_cuda() ? x.contiguous(at::MemoryFormat::ChannelsLast) : x;
    Tensor h = torch::relu(bn1->forward(conv1->forward(in)));
    for (auto& b : blocks) h = b->forward(h);
    h = torch::adaptive_avg_pool2d(h, {1, 1}).flatten(1);
    return {linear(fc, h)};
  }
};

// CleanRL's PPO layout: separate 64x64 tanh trunks for the policy and the value (a shared trunk lets
// the value loss disturb the policy's features), orthogonal weights with gain sqrt(2), and small heads:
// policy 0.01 (a near-uniform first policy, log_std ~ 0 for a Gaussian), value 1.0. Zero biases.
struct ActorCriticMlp : Net {
  nn::Linear fc1{nullptr}, fc2{nullptr}, policy{nullptr}, vfc1{nullptr}, vfc2{nullptr}, value{nullptr};
  explicit ActorCriticMlp(const ModelSpec& s) {
    const std::int64_t in = s.channels * s.height * s.width;
    fc1 = register_module("fc1", layer(nn::Linear(in, 64), std::sqrt(2.0)));
    fc2 = register_module("fc2", layer(nn::Linear(64, 64), std::sqrt(2.0)));
    policy = register_module("policy", layer(nn::Linear(64, s.num_classes), 0.01));
    vfc1 = register_module("vfc1", layer(nn::Linear(in, 64), std::sqrt(2.0)));
    vfc2 = register_module("vfc2", layer(nn::Linear(64, 64), std::sqrt(2.0)));
    value = register_module("value", layer(nn::Linear(64, 1), 1.0));
  }
  static nn::Linear layer(nn::Linear l, double gain) {
    torch::NoGradGuard no_grad;
    nn::init::orthogonal_(l->weight, gain);
    nn::init::zeros_(l->bias);
    return l;
  }
  std::vector<Tensor> heads(const Tensor& x) override {
    const Tensor f = x.flatten(1);
    const Tensor h = torch::tanh(linear(fc2, torch::tanh(linear(fc1, f))));
    const Tensor v = torch::tanh(linear(vfc2, torch::tanh(linear(vfc1, f))));
    return {linear(policy, h), linear(value, v).squeeze(-1)};
  }
};

using Factory = std::function<std::shared_ptr<Net>(const ModelSpec&)>;

const std::vector<std::pair<std::string, Factory>>& registry() {
  static const std::vector<std::pair<std::string, Factory>> r = {
      {"mlp", [](const ModelSpec& s) { return std::make_shared<Mlp>(s); }},
      {"cnn", [](const ModelSpec& s) { return std::make_shared<Cnn>(s); }},
      {"resnet18", [](const ModelSpec& s) { return std::make_shared<ResNet18>(s); }},
      {"actor_critic_mlp", [](const ModelSpec& s) { return std::make_shared<ActorCriticMlp>(s); }},
  };
  // The launcher validates model.name against kBuiltinModels (torch-free): the two must agree.
  static const bool same = std::equal(r.begin(), r.end(), kBuiltinModels.begin(), kBuiltinModels.end(),
                                      [](const auto& entry, std::string_view name) { return entry.first == name; });
  if (!same) throw std::logic_error("common/settings/data.hpp kBuiltinModels differs from the model registry");
  return r;
}

NamedTensors to_named(const torch::OrderedDict<std::string, Tensor>& d) {
  NamedTensors out;
  for (const auto& item : d) out.emplace_back(item.key(), item.value());
  return out;
}

template <class SlotList>
NamedTensors to_named_jit(const SlotList& list) {
  NamedTensors out;
  for (const auto& item : list) out.emplace_back(item.name, item.value);
  return out;
}

// One line of a LibTorch error: the first (the rest is a C++ backtrace no user needs), or for the
// TorchScript interpreter, whose first line only says that something failed, the last.
std::string first_line(const std::exception& e) {
  std::string s = e.what();
  if (s.rfind("The following operation failed in the TorchScript interpreter", 0) == 0) {
    while (!s.empty() && s.back() == '\n') s.pop_back();
    return s.substr(s.rfind('\n') + 1);
  }
  return s.substr(0, s.find('\n'));
}

}  // namespace

const std::vector<std::string>& builtin_model_names() {
  static const std::vector<std::string> names(kBuiltinModels.begin(), kBuiltinModels.end());
  return names;
}

struct Model::Impl {
  ModelSpec spec;
  std::shared_ptr<Net> net;                  // built-in
  std::unique_ptr<torch::jit::Module> jit;   // TorchScript

  std::vector<Tensor> heads(const Tensor& x) {
    if (net) return net->heads(x);
    torch::jit::IValue out = jit->forward({x});
    if (out.isTensor()) return {out.toTensor()};
    if (out.isTuple()) {
      std::vector<Tensor> r;
      for (const auto& e : out.toTuple()->elements()) r.push_back(e.toTensor());
      return r;
    }
    fail("TorchScript model '{}' returned a {}, not a tensor or a tuple of tensors: make forward return the logits",
         spec.name, out.tagKind());
  }
};

Model::Model(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Model::Model(Model&&) noexcept = default;
Model& Model::operator=(Model&&) noexcept = default;
Model::~Model() = default;

Model Model::create(const ModelSpec& spec) {
  if (spec.channels < 1 || spec.height < 1 || spec.width < 1 || spec.num_classes < 1)
    fail("model '{}' was given input {}x{}x{} and {} classes: every size must be at least 1", spec.name,
         spec.channels, spec.height, spec.width, spec.num_classes);
  auto impl = std::make_unique<Impl>();
  impl->spec = spec;
  torch::manual_seed(spec.seed);
  for (const auto& [name, factory] : registry())
    if (name == spec.name) impl->net = factory(spec);
  if (!impl->net) {
    if (!std::filesystem::is_regular_file(spec.name))
      fail("model '{}' is neither a built-in ({}) nor a TorchScript file: check the name or the path", spec.name,
           fmt::join(builtin_model_names(), ", "));
    try {
      impl->jit = std::make_unique<torch::jit::Module>(torch::jit::load(spec.name, torch::kCPU));
    } catch (const c10::Error& e) {
      fail("model file '{}' is not a TorchScript module ({}): save it with torch.jit.save", spec.name,
           first_line(e));
    }
    if (!impl->jit->find_method("forward"))
      fail("TorchScript model '{}' has no forward method: script the module, not a function", spec.name);
  }
  Model model(std::move(impl));
  model.train(true);

  // Dry run in eval mode (so BatchNorm statistics stay untouched): the output must be [2, classes].
  model.eval();
  std::vector<Tensor> out;
  try {
    torch::NoGradGuard no_grad;
    out = model.forward_heads(torch::zeros({2, spec.channels, spec.height, spec.width}));
  } catch (const UserError&) {
    throw;
  } catch (const std::exception& e) {  // c10::Error, or the TorchScript interpreter's errors
    fail("model '{}' cannot take input [B, {}, {}, {}]: {}", spec.name, spec.channels, spec.height, spec.width,
         first_line(e));
  }
  model.train(true);
  if (out.empty() || out[0].dim() != 2 || out[0].size(0) != 2 || out[0].size(1) != spec.num_classes)
    fail("model '{}' returns logits of shape {} for 2 samples, expected [2, {}]: check num_classes", spec.name,
         out.empty() ? std::string("(none)") : fmt::format("{}", fmt::join(out[0].sizes(), "x")), spec.num_classes);
  return model;
}

Tensor Model::forward(const Tensor& x) { return impl_->heads(x)[0]; }
std::vector<Tensor> Model::forward_heads(const Tensor& x) { return impl_->heads(x); }

NamedTensors Model::named_parameters() const {
  if (impl_->net) return to_named(impl_->net->named_parameters(true));
  return to_named_jit(impl_->jit->named_parameters(true));
}

NamedTensors Model::named_buffers() const {
  if (impl_->net) return to_named(impl_->net->named_buffers(true));
  return to_named_jit(impl_->jit->named_buffers(true));
}

std::vector<Tensor> Model::parameters() const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_parameters()) out.push_back(t);
  return out;
}

std::int64_t Model::num_parameters() const {
  std::int64_t n = 0;
  for (const auto& [name, t] : named_parameters()) n += t.numel();
  return n;
}

void Model::train(bool on) {
  if (impl_->net)
    impl_->net->train(on);
  else
    impl_->jit->train(on);
}

bool Model::is_training() const { return impl_->net ? impl_->net->is_training() : impl_->jit->is_training(); }

void Model::to(const torch::Device& device) {
  if (impl_->net)
    impl_->net->to(device);
  else
    impl_->jit->to(device);
}

torch::Device Model::device() const {
  for (const auto& [name, t] : named_parameters()) return t.device();
  for (const auto& [name, t] : named_buffers()) return t.device();
  return torch::kCPU;
}

torch::nn::Module* Model::nn_module() const { return impl_->net.get(); }
torch::jit::Module* Model::jit_module() const { return impl_->jit.get(); }
const ModelSpec& Model::spec() const { return impl_->spec; }

std::string Model::describe() const {
  return fmt::format("{} ({}x{}x{} -> {}, {} parameters)", impl_->spec.name, impl_->spec.channels,
                     impl_->spec.height, impl_->spec.width, impl_->spec.num_classes, num_parameters());
}

}  // namespace tandem
