#include "common/torch/builtin_nets/networks.hpp"

#include <ATen/Functions.h>
#include <fmt/format.h>
#include <torch/nn/functional/pooling.h>
#include <torch/nn/init.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include "common/error.hpp"
#include "common/settings/data.hpp"
#include "common/torch/builtin_nets/bn_act.hpp"
#include "common/torch/builtin_nets/conv_pool.hpp"
#include "common/torch/builtin_nets/cudnn_conv.hpp"
#include "common/torch/builtin_nets/fused_bn_relu_pool.hpp"
#include "common/torch/model_spec.hpp"
#include "common/torch/builtin_nets/stem_conv.hpp"
#include "common/torch/builtin_nets/weight_prep.hpp"

namespace tandem::nets {

torch::Tensor Net::folded_logits(const torch::Tensor&, const Folded&) {
  throw std::logic_error("Net::folded_logits called on a network without BatchNorm to fold");
}

namespace {

namespace nn = torch::nn;
using torch::Tensor;

nn::Conv2d conv3x3(std::int64_t in, std::int64_t out, std::int64_t stride = 1) {
  return nn::Conv2d(nn::Conv2dOptions(in, out, 3).stride(stride).padding(1).bias(false));
}

// A GPU forward's input: channels-last in the compute dtype, one conversion.
Tensor to_compute(const Tensor& x, torch::ScalarType dtype) {
  return x.to(dtype, /*non_blocking=*/false, /*copy=*/false, at::MemoryFormat::ChannelsLast);
}

// A linear layer in the input's dtype (bf16 weights cast per call, as autocast does; an autograd
// op, so the gradients reach the float32 parameters).
Tensor dense(nn::Linear& l, const Tensor& x) {
  if (x.scalar_type() == l->weight.scalar_type()) return l->forward(x);
  return torch::linear(x, l->weight.to(x.scalar_type()), l->bias.to(x.scalar_type()));
}

// A built-in convolution's padding: they all pad kernel / 2, with dilation 1 and one group (conv3x3
// and the 1x1 downsample), which nn::Conv2d's protected _conv_forward would read.
std::array<std::int64_t, 2> padding_of(const Tensor& w) { return {w.size(2) / 2, w.size(3) / 2}; }

// A built-in convolution with another weight (and bias).
Tensor conv_with(const nn::Conv2d& c, const Tensor& x, const Tensor& w, const Tensor& b = {}) {
  return at::conv2d(x, w, b, c->options.stride(), padding_of(w));
}

// The convolution weights of one forward: on the GPU all of them converted at once
// (weight_prep.hpp), on the CPU the parameters themselves.
class ConvWeights {
 public:
  ConvWeights(const std::vector<nn::Conv2d>& convs, const Tensor& x, torch::ScalarType dtype) : convs_(convs) {
    if (!x.is_cuda()) return;
    std::vector<Tensor> params;
    params.reserve(convs.size());
    for (const nn::Conv2d& c : convs) params.push_back(c->weight);
    weights_ = channels_last_weights(params, dtype);
  }
  Tensor operator()(nn::Conv2d& c, const Tensor& x) const {
    if (weights_.empty()) return c->forward(x);
    const Tensor& w = weight_of(c);
    if (stem_conv_applies(x, w, c->options.stride(), padding_of(w))) return stem_conv3x3(x, w);
    return conv_with(c, x, w);
  }
  // (c applied to x, x again to read in x's other uses): on the GPU the two uses' gradients meet in
  // cuDNN's data-gradient kernel instead of an add (cudnn_conv.hpp).
  std::pair<Tensor, Tensor> sharing_input(nn::Conv2d& c, const Tensor& x) const {
    if (weights_.empty()) return {c->forward(x), x};
    const Tensor& w = weight_of(c);
    return conv2d_sharing_input(x, w, c->options.stride(), padding_of(w));
  }

 private:
  const Tensor& weight_of(const nn::Conv2d& c) const {
    for (std::size_t i = 0; i < convs_.size(); ++i)
      if (convs_[i].get() == c.get()) return weights_[i];
    throw std::logic_error("ConvWeights: a convolution outside the network's list");
  }

  const std::vector<nn::Conv2d>& convs_;
  std::vector<Tensor> weights_;
};

// A folded convolution (BatchNorm inside its weight and bias) with the ReLU and the add in cuDNN's
// epilogue: y = relu(conv(x) + bias [+ add]).
Tensor folded_conv(nn::Conv2d& c, const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& add = {},
                   bool relu = true) {
  if (!relu) return conv_with(c, x, w, b);
  const std::array<std::int64_t, 2> padding = padding_of(w), dilation{1, 1};
  const at::IntArrayRef stride = c->options.stride();
  if (add.defined()) return at::cudnn_convolution_add_relu(x, w, add, 1, b, stride, padding, dilation, 1);
  return at::cudnn_convolution_relu(x, w, b, stride, padding, dilation, 1);
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
    const Tensor in = x.is_cuda() ? x.to(compute_dtype) : x;
    Tensor h = torch::relu(dense(fc1, in.flatten(1)));
    h = torch::relu(dense(fc2, h));
    return {dense(fc3, h).to(torch::kFloat32)};
  }
};

// Two conv blocks (conv-BN-ReLU-maxpool) then one hidden layer. BatchNorm is what makes two epochs
// enough. Widths 16/32, not the usual 32/64: measured on a 2-core Debian machine (the developers' and
// CI's) they train faster per sample and reach the same accuracy at two epochs (docs/results/HISTORY.md,
// "Fashion-MNIST recipe").
struct Cnn : Net {
  nn::Conv2d conv1{nullptr}, conv2{nullptr};
  nn::BatchNorm2d bn1{nullptr}, bn2{nullptr};
  nn::Linear fc1{nullptr}, fc2{nullptr};
  std::vector<nn::Conv2d> convs;
  explicit Cnn(const ModelSpec& s) {
    if (s.height % 4 != 0 || s.width % 4 != 0)
      fail("model 'cnn' needs a height and width divisible by 4, got {}x{}: use 'mlp' or resize the data", s.height,
           s.width);
    conv1 = register_module("conv1", conv3x3(s.channels, 16));
    bn1 = register_module("bn1", nn::BatchNorm2d(16));
    conv2 = register_module("conv2", conv3x3(16, 32));
    bn2 = register_module("bn2", nn::BatchNorm2d(32));
    fc1 = register_module("fc1", nn::Linear(32 * (s.height / 4) * (s.width / 4), 128));
    fc2 = register_module("fc2", nn::Linear(128, s.num_classes));
    convs = {conv1, conv2};
  }
  std::vector<Tensor> heads(const Tensor& x) override {
    if (!x.is_cuda()) {
      // oneDNN's convolutions run natively channels-last (NCHW is reordered to a blocked layout and
      // back around every call), and the fused BatchNorm-ReLU-pool needs it. A copy, even for one
      // channel, where contiguous(ChannelsLast) would keep NCHW strides oneDNN does not take.
      const Tensor in = torch::empty_like(x, at::MemoryFormat::ChannelsLast).copy_(x);
      Tensor h = bn_relu_pool(bn1, conv1->forward(in));
      h = bn_relu_pool(bn2, conv2->forward(h));
      h = torch::relu(fc1->forward(h.flatten(1)));
      return {fc2->forward(h)};
    }
    const Tensor in = to_compute(x, compute_dtype);
    const ConvWeights w(convs, in, compute_dtype);
    Tensor h = torch::max_pool2d(bn_act(*bn1, w(conv1, in)), 2);
    h = torch::max_pool2d(bn_act(*bn2, w(conv2, h)), 2);
    h = torch::relu(dense(fc1, h.flatten(1)));
    return {dense(fc2, h).to(torch::kFloat32)};
  }
  std::vector<FoldPair> fold_pairs() override { return {{conv1, bn1}, {conv2, bn2}}; }
  // The first block in one kernel where it takes the sizes (conv_pool.hpp), else cuDNN and a pool.
  Tensor folded_logits(const Tensor& x, const Folded& f) override {
    Tensor h = conv3x3_relu_pool2(x, f.weight[0], f.bias[0]).value_or(Tensor());
    if (!h.defined()) h = max_pool2(folded_conv(conv1, to_compute(x, f.dtype), f.weight[0], f.bias[0]));
    h = max_pool2(folded_conv(conv2, h, f.weight[1], f.bias[1]));
    h = torch::relu(dense(fc1, h.flatten(1)));
    return dense(fc2, h).to(torch::kFloat32);
  }
};

// torchvision's BasicBlock, with its parameter names (conv1, bn1, conv2, bn2, downsample.0/1), so
// checkpoints line up with the usual Python CIFAR ResNet-18.
struct BasicBlock : nn::Module {
  nn::Conv2d conv1{nullptr}, conv2{nullptr}, down_conv{nullptr};
  nn::BatchNorm2d bn1{nullptr}, bn2{nullptr}, down_bn{nullptr};
  BasicBlock(std::int64_t in, std::int64_t out, std::int64_t stride) {
    conv1 = register_module("conv1", conv3x3(in, out, stride));
    bn1 = register_module("bn1", nn::BatchNorm2d(out));
    conv2 = register_module("conv2", conv3x3(out, out));
    bn2 = register_module("bn2", nn::BatchNorm2d(out));
    if (stride != 1 || in != out) {
      down_conv = nn::Conv2d(nn::Conv2dOptions(in, out, 1).stride(stride).bias(false));
      down_bn = nn::BatchNorm2d(out);
      register_module("downsample", nn::Sequential(down_conv, down_bn));
    }
  }
  Tensor forward(const Tensor& x, const ConvWeights& w) {
    const auto [c1, x_again] = w.sharing_input(conv1, x);
    const Tensor h = bn_act(*bn1, c1);
    const Tensor shortcut = down_conv ? bn_act(*down_bn, w(down_conv, x_again), {}, /*relu=*/false) : x_again;
    return bn_act(*bn2, w(conv2, h), shortcut);
  }
};

struct ResNet18 : Net {
  nn::Conv2d conv1{nullptr};
  nn::BatchNorm2d bn1{nullptr};
  std::vector<std::shared_ptr<BasicBlock>> blocks;
  nn::Linear fc{nullptr};
  std::vector<nn::Conv2d> convs;
  explicit ResNet18(const ModelSpec& s) {
    conv1 = register_module("conv1", conv3x3(s.channels, 64));
    bn1 = register_module("bn1", nn::BatchNorm2d(64));
    convs = {conv1};
    std::int64_t in = 64;
    const std::int64_t widths[] = {64, 128, 256, 512};
    for (int layer = 0; layer < 4; ++layer) {
      auto seq = register_module(fmt::format("layer{}", layer + 1), nn::Sequential());
      for (int b = 0; b < 2; ++b) {
        auto block = std::make_shared<BasicBlock>(in, widths[layer], (layer > 0 && b == 0) ? 2 : 1);
        seq->push_back(block);
        blocks.push_back(block);
        convs.insert(convs.end(), {block->conv1, block->conv2});
        if (block->down_conv) convs.push_back(block->down_conv);
        in = widths[layer];
      }
    }
    fc = register_module("fc", nn::Linear(512, s.num_classes));
  }
  // On the GPU the activations go channels-last (NHWC): cuDNN's tensor-core convolutions and the
  // fused BatchNorm run natively in it (measured with bench/peers/resnet_layouts.py:
  // docs/results/HISTORY.md, "CUDA graphs (before the fused layers)"). The weights stay NCHW in the flat parameters.
  std::vector<Tensor> heads(const Tensor& x) override {
    const Tensor in = x.is_cuda() ? to_compute(x, compute_dtype) : x;
    const ConvWeights w(convs, in, compute_dtype);
    BatchCounts counts;
    Tensor h = bn_act(*bn1, w(conv1, in));
    for (auto& b : blocks) h = b->forward(h, w);
    counts.apply();
    if (std::optional<Tensor> logits = pool_linear(h, fc->weight, fc->bias)) return {*logits};
    h = torch::adaptive_avg_pool2d(h, {1, 1}).flatten(1);
    return {dense(fc, h).to(torch::kFloat32)};
  }
  // Per block: conv1, conv2 (which adds the downsample's folded bias), then the downsample.
  std::vector<FoldPair> fold_pairs() override {
    std::vector<FoldPair> pairs{{conv1, bn1}};
    for (auto& b : blocks) {
      const int at = static_cast<int>(pairs.size());
      pairs.push_back({b->conv1, b->bn1});
      pairs.push_back({b->conv2, b->bn2, b->down_conv ? at + 2 : -1});
      if (b->down_conv) pairs.push_back({b->down_conv, b->down_bn, -1, /*bias=*/false});
    }
    return pairs;
  }
  Tensor folded_logits(const Tensor& x, const Folded& f) override {
    const Tensor in = to_compute(x, f.dtype);
    Tensor h = stem_conv_applies(in, f.weight[0], conv1->options.stride(), padding_of(f.weight[0]))
                   ? stem_conv3x3_bias_relu(in, f.weight[0], f.bias[0])
                   : folded_conv(conv1, in, f.weight[0], f.bias[0]);
    std::size_t k = 1;
    for (auto& b : blocks) {
      const Tensor t = folded_conv(b->conv1, h, f.weight[k], f.bias[k]);
      const Tensor shortcut = b->down_conv ? folded_conv(b->down_conv, h, f.weight[k + 2], {}, {}, false) : h;
      h = folded_conv(b->conv2, t, f.weight[k + 1], f.bias[k + 1], shortcut);
      k += b->down_conv ? 3 : 2;
    }
    if (auto logits = pool_linear(h, fc->weight, fc->bias)) return *logits;
    h = torch::adaptive_avg_pool2d(h, {1, 1}).flatten(1);
    return dense(fc, h).to(torch::kFloat32);
  }
};

// CleanRL's PPO layout: separate 64x64 tanh trunks for the policy and the value (a shared trunk lets
// the value loss disturb the policy's features), orthogonal weights with gain sqrt(2), and small heads:
// policy 0.01 (a near-uniform first policy), value 1.0. Zero biases. ModelSpec::hidden widens both
// layers; ModelSpec::shared_trunk puts both heads on the policy's trunk (fc1, fc2: Sample Factory's
// default), with no vfc1, vfc2.
// A Gaussian policy (gaussian_dims > 0) is CleanRL's continuous one: the head gives the means, the
// log-std is a parameter of its own (one per dimension, starting at 0, so std 1), the same for every
// state; heads() returns [mean, log_std] as policy.hpp reads them. A log-std that a head predicts per
// state lets the exploration noise collapse where the value is flat, and learns slower on MuJoCo.
// norm_obs: observations are normalised by the running statistics in the buffers obs_mean, obs_var
// (gymnasium's NormalizeObservation: (x - mean) / sqrt(var + 1e-8), then clipped to +-10, as CleanRL
// clips them), before both trunks. Buffers so that the weight slab publishes them with the weights and
// checkpoints keep them; this network only reads them (rl_model.hpp says who writes them).
struct ActorCriticMlp : Net {
  nn::Linear fc1{nullptr}, fc2{nullptr}, policy{nullptr}, vfc1{nullptr}, vfc2{nullptr}, value{nullptr};
  Tensor log_std, obs_mean, obs_var;
  explicit ActorCriticMlp(const ModelSpec& s) {
    const std::int64_t in = s.channels * s.height * s.width;
    const std::int64_t policy_out = s.gaussian_dims > 0 ? s.gaussian_dims : s.num_classes;
    const std::int64_t w = s.hidden;
    fc1 = register_module("fc1", layer(nn::Linear(in, w), std::sqrt(2.0)));
    fc2 = register_module("fc2", layer(nn::Linear(w, w), std::sqrt(2.0)));
    policy = register_module("policy", layer(nn::Linear(w, policy_out), 0.01));
    if (!s.shared_trunk) {
      vfc1 = register_module("vfc1", layer(nn::Linear(in, w), std::sqrt(2.0)));
      vfc2 = register_module("vfc2", layer(nn::Linear(w, w), std::sqrt(2.0)));
    }
    value = register_module("value", layer(nn::Linear(w, 1), 1.0));
    if (s.gaussian_dims > 0) {
      if (2 * s.gaussian_dims != s.num_classes)
        fail("actor_critic_mlp: a Gaussian policy over {} dimensions gives {} outputs, not {}", s.gaussian_dims,
             2 * s.gaussian_dims, s.num_classes);
      log_std = register_parameter("log_std", torch::zeros({s.gaussian_dims}));
    }
    if (s.norm_obs) {
      obs_mean = register_buffer(kObsMeanBuffer, torch::zeros({in}));
      obs_var = register_buffer(kObsVarBuffer, torch::ones({in}));
      register_buffer(kObsCountBuffer, torch::full({1}, 1e-4, torch::kFloat64));  // gymnasium's starting count
    }
  }
  static nn::Linear layer(nn::Linear l, double gain) {
    torch::NoGradGuard no_grad;
    nn::init::orthogonal_(l->weight, gain);
    nn::init::zeros_(l->bias);
    return l;
  }
  std::vector<Tensor> heads(const Tensor& x) override {
    Tensor f = x.flatten(1);
    if (obs_mean.defined()) f = ((f - obs_mean) * (obs_var + 1e-8).rsqrt()).clamp(-10.0, 10.0);
    const Tensor h = torch::tanh(fc2->forward(torch::tanh(fc1->forward(f))));
    const Tensor v = vfc1 ? torch::tanh(vfc2->forward(torch::tanh(vfc1->forward(f)))) : h;
    Tensor params = policy->forward(h);
    if (log_std.defined()) params = torch::cat({params, log_std.expand_as(params)}, 1);
    return {params, value->forward(v).squeeze(-1)};
  }
};

// For image observations (EnvSpec::obs_channels x obs_height x obs_width): CleanRL's Atari PPO layout
// scaled to small grids (MinAtar's 10 x 10): one shared trunk of two 3 x 3 convolutions (32 channels,
// padding 1, so the grid keeps its size) and a 256-wide layer, all ReLU, orthogonal weights with gain
// sqrt(2); heads as actor_critic_mlp's (policy 0.01, value 1.0; a Gaussian policy's log-std a
// parameter). It does not normalise observations (images are already in [0, 1]).
struct ActorCriticCnn : Net {
  nn::Conv2d conv1{nullptr}, conv2{nullptr};
  nn::Linear fc{nullptr}, policy{nullptr}, value{nullptr};
  Tensor log_std;
  explicit ActorCriticCnn(const ModelSpec& s) {
    if (s.norm_obs) fail("actor_critic_cnn does not normalise observations: set rl.norm_obs = false");
    const std::int64_t policy_out = s.gaussian_dims > 0 ? s.gaussian_dims : s.num_classes;
    conv1 = register_module("conv1", conv(nn::Conv2d(nn::Conv2dOptions(s.channels, 32, 3).padding(1))));
    conv2 = register_module("conv2", conv(nn::Conv2d(nn::Conv2dOptions(32, 32, 3).padding(1))));
    fc = register_module("fc", ActorCriticMlp::layer(nn::Linear(32 * s.height * s.width, 256), std::sqrt(2.0)));
    policy = register_module("policy", ActorCriticMlp::layer(nn::Linear(256, policy_out), 0.01));
    value = register_module("value", ActorCriticMlp::layer(nn::Linear(256, 1), 1.0));
    if (s.gaussian_dims > 0) log_std = register_parameter("log_std", torch::zeros({s.gaussian_dims}));
  }
  static nn::Conv2d conv(nn::Conv2d c) {
    torch::NoGradGuard no_grad;
    nn::init::orthogonal_(c->weight, std::sqrt(2.0));
    nn::init::zeros_(c->bias);
    return c;
  }
  std::vector<Tensor> heads(const Tensor& x) override {
    const Tensor h = torch::relu(fc->forward(torch::relu(conv2->forward(torch::relu(conv1->forward(x)))).flatten(1)));
    Tensor params = policy->forward(h);
    if (log_std.defined()) params = torch::cat({params, log_std.expand_as(params)}, 1);
    return {params, value->forward(h).squeeze(-1)};
  }
};

using Factory = std::function<std::shared_ptr<Net>(const ModelSpec&)>;

const std::vector<std::pair<std::string, Factory>>& registry() {
  static const std::vector<std::pair<std::string, Factory>> r = {
      {"mlp", [](const ModelSpec& s) { return std::make_shared<Mlp>(s); }},
      {"cnn", [](const ModelSpec& s) { return std::make_shared<Cnn>(s); }},
      {"resnet18", [](const ModelSpec& s) { return std::make_shared<ResNet18>(s); }},
      {"actor_critic_mlp", [](const ModelSpec& s) { return std::make_shared<ActorCriticMlp>(s); }},
      {"actor_critic_cnn", [](const ModelSpec& s) { return std::make_shared<ActorCriticCnn>(s); }},
  };
  // The launcher validates model.name against kBuiltinModels (torch-free): the two must agree.
  static const bool same = std::equal(r.begin(), r.end(), kBuiltinModels.begin(), kBuiltinModels.end(),
                                      [](const auto& entry, std::string_view name) { return entry.first == name; });
  if (!same) throw std::logic_error("common/settings/data.hpp kBuiltinModels differs from the model registry");
  return r;
}

}  // namespace

std::shared_ptr<Net> make_builtin(const ModelSpec& spec) {
  for (const auto& [name, factory] : registry())
    if (name == spec.name) return factory(spec);
  return nullptr;
}

}  // namespace tandem::nets
