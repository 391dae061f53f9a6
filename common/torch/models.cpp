#include "common/torch/models.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <c10/core/InferenceMode.h>
#include <torch/autograd.h>
#include <torch/nn.h>
#include <torch/script.h>

#ifdef TANDEM_TORCH_CUDA
#include <ATen/autocast_mode.h>
#endif

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>

#include "common/error.hpp"
#include "common/settings/data.hpp"
#include "common/torch/aoti_package.hpp"
#include "common/torch/builtin_nets/networks.hpp"

namespace tandem {
namespace {

using torch::Tensor;

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
std::string torchscript_error_line(const std::exception& e) {
  std::string s = e.what();
  if (s.rfind("The following operation failed in the TorchScript interpreter", 0) == 0) {
    while (!s.empty() && s.back() == '\n') s.pop_back();
    return s.substr(s.rfind('\n') + 1);
  }
  return first_line(e);
}

#ifdef TANDEM_TORCH_CUDA
// torch.autocast(device_type="cuda", dtype=...) for a TorchScript model's forward.
class AutocastScope {
 public:
  explicit AutocastScope(torch::ScalarType dtype)
      : was_enabled_(at::autocast::is_autocast_enabled(at::kCUDA)),
        was_dtype_(at::autocast::get_autocast_dtype(at::kCUDA)) {
    at::autocast::set_autocast_enabled(at::kCUDA, true);
    at::autocast::set_autocast_dtype(at::kCUDA, dtype);
  }
  ~AutocastScope() {
    at::autocast::set_autocast_enabled(at::kCUDA, was_enabled_);
    at::autocast::set_autocast_dtype(at::kCUDA, was_dtype_);
    if (!was_enabled_) at::autocast::clear_cache();
  }
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  bool was_enabled_;
  torch::ScalarType was_dtype_;
};
#endif

}  // namespace

const std::vector<std::string>& builtin_model_names() {
  static const std::vector<std::string> names(kBuiltinModels.begin(), kBuiltinModels.end());
  return names;
}

struct Model::Impl {
  ModelSpec spec;
  std::shared_ptr<nets::Net> net;           // built-in
  std::unique_ptr<torch::jit::Module> jit;  // TorchScript
  torch::ScalarType precision = torch::kFloat32;
  std::string package_path;              // set_package
  std::unique_ptr<AotiPackage> package;  // loaded once the model is on a GPU

  std::vector<Tensor> heads(const Tensor& x) {
    if (package && !x.is_cpu()) {
      if (net ? net->is_training() : jit->is_training())
        fail("model package '{}' evaluates only: the learner trains '{}' itself", package_path, spec.name);
      return {package->run(x)};
    }
    if (net) return net->heads(x);
#ifdef TANDEM_TORCH_CUDA
    std::optional<AutocastScope> autocast;
    if (precision != torch::kFloat32 && x.is_cuda()) autocast.emplace(precision);
#endif
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
    fail("model '{}' was given input {}x{}x{} and {} classes: every size must be at least 1", spec.name, spec.channels,
         spec.height, spec.width, spec.num_classes);
  auto impl = std::make_unique<Impl>();
  impl->spec = spec;
  torch::manual_seed(spec.seed);
  impl->net = nets::make_builtin(spec);
  if (!impl->net) {
    if (!std::filesystem::is_regular_file(spec.name))
      fail("model '{}' is neither a built-in ({}) nor a TorchScript file: check the name or the path", spec.name,
           fmt::join(builtin_model_names(), ", "));
    try {
      impl->jit = std::make_unique<torch::jit::Module>(torch::jit::load(spec.name, torch::kCPU));
    } catch (const c10::Error& e) {
      fail("model file '{}' is not a TorchScript module ({}): save it with torch.jit.save", spec.name,
           torchscript_error_line(e));
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
         torchscript_error_line(e));
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

std::vector<Tensor> Model::trainable_parameters() const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_parameters())
    if (t.requires_grad()) out.push_back(t);
  return out;
}

std::int64_t Model::num_parameters() const {
  std::int64_t n = 0;
  for (const auto& [name, t] : named_parameters()) n += t.numel();
  return n;
}

void Model::train(bool on) {
  if (impl_->net) impl_->net->train(on);
  else impl_->jit->train(on);
}

bool Model::is_training() const { return impl_->net ? impl_->net->is_training() : impl_->jit->is_training(); }

void Model::to(const torch::Device& device) {
  if (impl_->net) impl_->net->to(device);
  else impl_->jit->to(device);
  impl_->package.reset();
  if (!impl_->package_path.empty() && device.is_cuda()) {
    NamedTensors all = named_parameters();
    for (auto& b : named_buffers()) all.push_back(b);
    impl_->package = std::make_unique<AotiPackage>(impl_->package_path, all, device);
    impl_->package->load_weights();
  }
}

void Model::set_package(const std::string& path) {
  if (auto why = AotiPackage::unsupported()) fail("model package '{}': {}", path, *why);
  impl_->package_path = path;
  if (device().is_cuda()) to(device());
}

bool Model::has_package() const { return !impl_->package_path.empty(); }

void Model::weights_changed() {
  if (impl_->package) impl_->package->load_weights();
}

torch::Device Model::device() const {
  for (const auto& [name, t] : named_parameters()) return t.device();
  for (const auto& [name, t] : named_buffers()) return t.device();
  return torch::kCPU;
}

void Model::set_precision(torch::ScalarType compute) {
  if (compute != torch::kFloat32 && compute != torch::kBFloat16)
    fail("model '{}': precision {} is not float32 or bfloat16", impl_->spec.name, c10::toString(compute));
  impl_->precision = compute;
  if (impl_->net) impl_->net->compute_dtype = compute;
}

torch::ScalarType Model::precision() const { return impl_->precision; }

torch::nn::Module* Model::nn_module() const { return impl_->net.get(); }
torch::jit::Module* Model::jit_module() const { return impl_->jit.get(); }
nets::Net* Model::builtin_network() const { return impl_->net.get(); }
const ModelSpec& Model::spec() const { return impl_->spec; }

std::string Model::describe() const {
  return fmt::format("{} ({}x{}x{} -> {}, {} parameters)", impl_->spec.name, impl_->spec.channels, impl_->spec.height,
                     impl_->spec.width, impl_->spec.num_classes, num_parameters());
}

}  // namespace tandem
