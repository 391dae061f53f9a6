// Flat parameters: a module's parameters and buffers re-homed into one contiguous byte buffer per
// device, so that each of them is a view of it. Publishing the weights is then one copy of one
// buffer, and loading them is one copy into it (or pointing the views at someone else's bytes).
//
// Layout: float32 tensors first (so that a bf16 publish converts one contiguous run), then every
// other dtype, each group in module order (parameters, then buffers). Every tensor starts at a
// multiple of kFlatAlignment. A tensor registered under two names (tied weights) is placed once,
// under its first name.
//
// Contract
//  * flatten() is called once, before the optimizer is built is customary but not required: it
//    keeps each parameter's identity (same TensorImpl, requires_grad, grad_fn-free leaf) and only
//    swaps its storage (Tensor::set_data), so an optimizer holding the parameters keeps working and
//    its in-place updates land in the flat buffer.
//  * Not thread-safe: flatten(), rebind() and adopt() must not run while another thread uses the module.
//  * A module may rebind a tensor after flattening (`p.data = t`, a dtype or device conversion, a
//    parameter or buffer replaced by another object): the buffer then no longer holds what the module
//    holds, and publishing or loading it would be silently stale. in_place() tells; adopt() takes the
//    module's tensor back into its place (a copy, then set_data) when its dtype, shape and device are
//    the table's, and refuses one that differs (the layout, and a slab made from it, cannot follow).
//  * Only dense CPU or CUDA tensors are flattened: a meta tensor holds no bytes (publishing it would
//    read address 0), a sparse one has no single place; both are refused by name.
//  * The signature is XXH3-64 over the table's canonical text (docs/FORMAT.md, "Model signature"):
//    equal signatures mean the same names, dtypes, shapes and byte layout.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace torch::nn {
class Module;
}
namespace torch::jit {
struct Module;
}

namespace tandem {

class Model;

inline constexpr std::size_t kFlatAlignment = 256;  // bytes; CUDA's and vector loads' alignment

struct FlatTensorInfo {
  std::string name;
  c10::ScalarType dtype;
  std::vector<std::int64_t> shape;
  std::uint64_t offset;  // bytes from the start of its device's flat buffer
  std::uint64_t bytes;
  c10::Device device;
};

class FlatParams {
 public:
  static FlatParams flatten(torch::nn::Module& module);
  static FlatParams flatten(torch::jit::Module& module);
  // A registry model (models.hpp): whichever of its two modules it holds.
  static FlatParams flatten(Model& model);
  // Named tensors in module order, parameters then buffers (a Python module's named_parameters()
  // followed by its named_buffers(): the `tandem` package flattens those).
  static FlatParams flatten(std::vector<std::pair<std::string, at::Tensor>> named);

  FlatParams() = default;

  const std::vector<FlatTensorInfo>& table() const { return table_; }
  std::uint64_t signature() const { return signature_; }
  std::string signature_hex() const;  // 16 hex digits

  // The one flat buffer (uint8, contiguous); fails with a clear message if the module spans devices.
  const at::Tensor& buffer() const;
  const std::vector<at::Tensor>& buffers() const { return flat_; }  // one per device
  std::uint64_t bytes() const;
  // Bytes of the leading float32 run: [0, float32_bytes()) holds every float32 tensor.
  std::uint64_t float32_bytes() const { return float32_bytes_; }

  // Points every parameter and buffer at the same layout inside `flat` (uint8, >= bytes(), same
  // device), e.g. a leased weight-slab slot: zero-copy loading. The old buffer is dropped.
  void rebind(const at::Tensor& flat);
  // The live tensors, in table order (the module's own parameter and buffer objects).
  const std::vector<at::Tensor>& tensors() const { return tensors_; }

  // Whether tensor i (table order) still views its place in the flat buffer: a dtype, device, shape
  // and pointer comparison, cheap enough for every publish.
  bool in_place(std::size_t i) const;
  // Tensor i is `t` from now on (the same object rebound, or one that replaced it in the module): it is
  // pointed at its place, after its values are copied there (Values::copy: a publisher publishes what
  // the module holds now) or not (Values::keep: a follower's module holds the version it loaded, and
  // the place may be a read-only leased slot). UserError naming the tensor when its dtype, shape or
  // device differ from the table's. With Values::copy the caller fences readers of the buffer first.
  enum class Values { copy, keep };
  void adopt(std::size_t i, const at::Tensor& t, Values values);
  // adopt() of every tensor no longer in place, as the module holds it now; how many there were.
  std::size_t adopt_rebound(Values values);

 private:
  static FlatParams build(std::vector<std::pair<std::string, at::Tensor>> named);
  std::vector<FlatTensorInfo> table_;
  std::vector<at::Tensor> tensors_;
  std::vector<at::Tensor> flat_;
  std::vector<std::size_t> flat_of_;  // table index -> index into flat_
  std::uint64_t signature_ = 0;
  std::uint64_t float32_bytes_ = 0;
};

// The canonical text the signature hashes: one line per tensor,
// "<name>\t<dtype>\t<d0,d1,...>\t<offset>\t<bytes>\n" with numpy dtype names ("float32").
std::string signature_text(const std::vector<FlatTensorInfo>& table);
std::uint64_t signature_of(const std::vector<FlatTensorInfo>& table);
const char* numpy_dtype_name(c10::ScalarType dtype);

}  // namespace tandem
