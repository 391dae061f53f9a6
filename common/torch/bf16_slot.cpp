#include "common/torch/bf16_slot.hpp"

#include <torch/types.h>
#include <torch/utils.h>

namespace tandem {
namespace {

// The layout's two runs, as torch sizes.
struct Runs {
  std::int64_t float32_bytes;  // bytes of the float32 run in flat (its bf16 copy is half that)
  std::int64_t rest_bytes;     // bytes after it, the same in flat and slot
};
Runs runs_of(const Bf16SlotLayout& layout) {
  return {static_cast<std::int64_t>(layout.float32_bytes),
          static_cast<std::int64_t>(layout.flat_bytes - layout.float32_bytes)};
}

}  // namespace

void pack_bf16_slot(const at::Tensor& flat, const Bf16SlotLayout& layout, std::byte* dst) {
  torch::NoGradGuard no_grad;
  const Runs r = runs_of(layout);
  const auto on = flat.options();
  if (r.float32_bytes > 0)
    torch::from_blob(dst, {r.float32_bytes / 4}, on.dtype(torch::kBFloat16))
        .copy_(flat.narrow(0, 0, r.float32_bytes).view(torch::kFloat));
  if (r.rest_bytes > 0)
    torch::from_blob(dst + r.float32_bytes / 2, {r.rest_bytes}, on)
        .copy_(flat.narrow(0, r.float32_bytes, r.rest_bytes));
}

void unpack_bf16_slot(const std::byte* src, const Bf16SlotLayout& layout, const at::Tensor& flat) {
  torch::NoGradGuard no_grad;
  const Runs r = runs_of(layout);
  auto* bytes = const_cast<std::byte*>(src);  // read only: from_blob takes a mutable pointer
  const auto on = flat.options();
  if (r.float32_bytes > 0)
    flat.narrow(0, 0, r.float32_bytes)
        .view(torch::kFloat)
        .copy_(torch::from_blob(bytes, {r.float32_bytes / 4}, on.dtype(torch::kBFloat16)));
  if (r.rest_bytes > 0)
    flat.narrow(0, r.float32_bytes, r.rest_bytes)
        .copy_(torch::from_blob(bytes + r.float32_bytes / 2, {r.rest_bytes}, on));
}

}  // namespace tandem
