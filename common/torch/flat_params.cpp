#include "common/torch/flat_params.hpp"

#include <torch/csrc/jit/api/module.h>
#include <torch/nn/module.h>
#include <torch/types.h>
#include <torch/utils.h>
#include <xxhash.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <unordered_set>

#include "common/error.hpp"
#include "common/quote.hpp"
#include "common/torch/models.hpp"

namespace tandem {
namespace {

std::uint64_t align(std::uint64_t v) { return (v + kFlatAlignment - 1) / kFlatAlignment * kFlatAlignment; }

// A view of `flat` with the tensor's dtype and shape, starting `offset` bytes in.
at::Tensor view_of(const at::Tensor& flat, const FlatTensorInfo& info) {
  std::int64_t elem = static_cast<std::int64_t>(c10::elementSize(info.dtype));
  auto bytes = flat.narrow(0, static_cast<std::int64_t>(info.offset), static_cast<std::int64_t>(info.bytes));
  if (info.bytes == 0)  // view(dtype) cannot reinterpret an empty slice; shape it directly
    return torch::empty(info.shape, flat.options().dtype(info.dtype))
        .set_(flat.storage(), static_cast<std::int64_t>(info.offset) / elem, info.shape,
              c10::contiguous_strides(info.shape));
  return bytes.view(info.dtype).view(info.shape);
}

std::string describe(c10::ScalarType dtype, c10::IntArrayRef shape, const c10::Device& device) {
  return fmt::format("{} [{}] on {}", numpy_dtype_name(dtype), fmt::join(shape, ", "), device.str());
}

// Before anything is allocated: tensors that have no dense bytes on a CPU or CUDA device.
void check_flattenable(const std::string& name, const at::Tensor& t) {
  if (t.is_meta())
    fail(
        "model tensor {} is on the meta device, which holds no data to publish or load: materialize the model "
        "first (model.to_empty(device='cpu'), then initialize or load its weights)",
        quote_escaped(name));
  if (t.layout() != c10::kStrided)
    fail("model tensor {} has layout {}: only dense tensors can be flattened; make it dense (.to_dense())",
         quote_escaped(name), c10::toString(t.layout()));
  if (!t.device().is_cpu() && !t.device().is_cuda())
    fail("model tensor {} is on the {} device: Tandem flattens CPU and CUDA tensors; move the model to one of them",
         quote_escaped(name), t.device().str());
}

}  // namespace

const char* numpy_dtype_name(c10::ScalarType dtype) {
  switch (dtype) {
    case c10::ScalarType::Float: return "float32";
    case c10::ScalarType::Double: return "float64";
    case c10::ScalarType::Half: return "float16";
    case c10::ScalarType::BFloat16: return "bfloat16";
    case c10::ScalarType::Long: return "int64";
    case c10::ScalarType::Int: return "int32";
    case c10::ScalarType::Short: return "int16";
    case c10::ScalarType::Char: return "int8";
    case c10::ScalarType::Byte: return "uint8";
    case c10::ScalarType::Bool: return "bool";
    default: return c10::toString(dtype);
  }
}

std::string signature_text(const std::vector<FlatTensorInfo>& table) {
  std::string text;
  for (const FlatTensorInfo& t : table)
    text += fmt::format("{}\t{}\t{}\t{}\t{}\n", t.name, numpy_dtype_name(t.dtype), fmt::join(t.shape, ","), t.offset,
                        t.bytes);
  return text;
}

std::uint64_t signature_of(const std::vector<FlatTensorInfo>& table) {
  std::string text = signature_text(table);
  return XXH3_64bits(text.data(), text.size());
}

FlatParams FlatParams::flatten(torch::nn::Module& module) {
  std::vector<std::pair<std::string, at::Tensor>> named;
  for (auto& p : module.named_parameters(true)) named.emplace_back(p.key(), p.value());
  for (auto& b : module.named_buffers(true)) named.emplace_back(b.key(), b.value());
  return build(std::move(named));
}

FlatParams FlatParams::flatten(torch::jit::Module& module) {
  std::vector<std::pair<std::string, at::Tensor>> named;
  for (const auto& p : module.named_parameters(true)) named.emplace_back(p.name, p.value);
  for (const auto& b : module.named_buffers(true)) named.emplace_back(b.name, b.value);
  return build(std::move(named));
}

FlatParams FlatParams::flatten(Model& model) {
  return model.nn_module() ? flatten(*model.nn_module()) : flatten(*model.jit_module());
}

FlatParams FlatParams::flatten(std::vector<std::pair<std::string, at::Tensor>> named) {
  return build(std::move(named));
}

FlatParams FlatParams::build(std::vector<std::pair<std::string, at::Tensor>> named) {
  // Tied weights: one TensorImpl under two names is placed once, under the first name.
  std::unordered_set<const void*> seen;
  std::erase_if(named, [&](const auto& nt) {
    return !nt.second.defined() || !seen.insert(nt.second.unsafeGetTensorImpl()).second;
  });
  if (named.empty()) fail("the model has no parameters or buffers to flatten: check that it registers them");
  std::stable_partition(named.begin(), named.end(),
                        [](const auto& nt) { return nt.second.scalar_type() == c10::ScalarType::Float; });

  for (const auto& [name, t] : named) check_flattenable(name, t);

  FlatParams fp;
  std::vector<c10::Device> devices;
  std::vector<std::uint64_t> used;
  for (const auto& [name, t] : named) {
    auto it = std::find(devices.begin(), devices.end(), t.device());
    if (it == devices.end()) {
      devices.push_back(t.device());
      used.push_back(0);
      it = devices.end() - 1;
    }
    std::size_t d = static_cast<std::size_t>(it - devices.begin());
    const auto bytes = static_cast<std::uint64_t>(t.numel() * t.element_size());  // both non-negative
    FlatTensorInfo info{name, t.scalar_type(), t.sizes().vec(), used[d], bytes, t.device()};
    used[d] = align(info.offset + info.bytes);
    fp.table_.push_back(std::move(info));
    fp.flat_of_.push_back(d);
    fp.tensors_.push_back(t);
  }
  for (std::size_t d = 0; d < devices.size(); ++d)
    fp.flat_.push_back(torch::zeros({static_cast<std::int64_t>(std::max<std::uint64_t>(used[d], 1))},
                                    torch::TensorOptions().dtype(torch::kUInt8).device(devices[d])));

  torch::NoGradGuard no_grad;
  for (std::size_t i = 0; i < fp.table_.size(); ++i) {
    at::Tensor view = view_of(fp.flat_[fp.flat_of_[i]], fp.table_[i]);
    view.copy_(fp.tensors_[i]);
    fp.tensors_[i].set_data(view);  // same parameter object, new storage: autograd and optimizers keep it
  }
  for (const FlatTensorInfo& t : fp.table_)
    if (t.dtype == c10::ScalarType::Float && t.device == fp.table_.front().device)
      fp.float32_bytes_ = std::max(fp.float32_bytes_, align(t.offset + t.bytes));
  fp.signature_ = signature_of(fp.table_);
  return fp;
}

std::string FlatParams::signature_hex() const { return fmt::format("{:016x}", signature_); }

const at::Tensor& FlatParams::buffer() const {
  if (flat_.size() != 1)
    fail(
        "the model's parameters live on {} devices; publishing and loading need them on one device: move the "
        "model to one device before flattening it",
        flat_.size());
  return flat_.front();
}

std::uint64_t FlatParams::bytes() const { return static_cast<std::uint64_t>(buffer().numel()); }

void FlatParams::rebind(const at::Tensor& flat) {
  const at::Tensor& current = buffer();
  if (flat.scalar_type() != torch::kUInt8 || flat.dim() != 1 || flat.numel() < current.numel() ||
      flat.device() != current.device())
    throw std::invalid_argument(fmt::format("FlatParams::rebind: need a 1-D uint8 tensor of >= {} bytes on {}",
                                            current.numel(), current.device().str()));
  torch::NoGradGuard no_grad;
  for (std::size_t i = 0; i < table_.size(); ++i) tensors_[i].set_data(view_of(flat, table_[i]));
  flat_.front() = flat;
}

bool FlatParams::in_place(std::size_t i) const {
  const at::Tensor& t = tensors_[i];
  const FlatTensorInfo& info = table_[i];
  if (!t.defined() || t.scalar_type() != info.dtype || t.device() != info.device || t.layout() != c10::kStrided ||
      t.sizes() != c10::IntArrayRef(info.shape) || !t.is_contiguous() || !t.has_storage())
    return false;
  const auto* flat = static_cast<const std::byte*>(flat_[flat_of_[i]].data_ptr());
  return static_cast<const std::byte*>(t.data_ptr()) == flat + info.offset;
}

void FlatParams::adopt(std::size_t i, const at::Tensor& t, Values values) {
  const FlatTensorInfo& info = table_[i];
  if (!t.defined() || t.scalar_type() != info.dtype || t.device() != info.device || t.layout() != c10::kStrided ||
      t.sizes() != c10::IntArrayRef(info.shape))
    fail(ErrorKind::shape,
         "model tensor {} no longer matches the layout it was flattened into: it is now {}, it was {}; convert the "
         "model before making its publisher or follower, or close that one and make a new one",
         quote_escaped(info.name), t.defined() ? describe(t.scalar_type(), t.sizes(), t.device()) : "gone",
         describe(info.dtype, info.shape, info.device));
  torch::NoGradGuard no_grad;
  at::Tensor view = view_of(flat_[flat_of_[i]], info);
  if (values == Values::copy && view.data_ptr() != t.data_ptr()) view.copy_(t);
  t.set_data(view);
  tensors_[i] = t;
}

std::size_t FlatParams::adopt_rebound(Values values) {
  std::size_t n = 0;
  for (std::size_t i = 0; i < table_.size(); ++i)
    if (!in_place(i)) {
      adopt(i, tensors_[i], values);
      ++n;
    }
  return n;
}

}  // namespace tandem
