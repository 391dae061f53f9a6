// The bf16 slot image of flat parameters: how a learner publishing with bf16 lays out a weight-slab
// slot, and how an actor reads it back. One definition for both sides.
//
// Layout: FlatParams puts every float32 tensor in one leading run [0, float32_bytes). In the slot
// image that run is stored as bfloat16 (half the bytes, element for element), and every byte after
// it follows unchanged, so it shifts down by float32_bytes / 2:
//
//   flat  [0, f32) float32          [f32, flat_bytes) other dtypes
//   slot  [0, f32/2) bfloat16       [f32/2, flat_bytes - f32/2) the same other bytes
//
// pack/unpack run as torch kernels on the device of `flat` (for CUDA, on torch's current stream,
// without synchronising); the slot memory they are given must be on that same device. They hold no
// state: any thread, as long as nobody else writes the same memory.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>

#include "common/torch/flat_params.hpp"

namespace tandem {

struct Bf16SlotLayout {
  std::uint64_t flat_bytes = 0;     // FlatParams::bytes()
  std::uint64_t float32_bytes = 0;  // FlatParams::float32_bytes(): the run stored as bfloat16

  static Bf16SlotLayout of(const FlatParams& params) { return {params.bytes(), params.float32_bytes()}; }

  std::uint64_t slot_bytes() const { return flat_bytes - float32_bytes / 2; }
  bool in_bf16_run(std::uint64_t flat_offset) const { return flat_offset < float32_bytes; }
  // Where the flat byte at flat_offset (a tensor's start) lies in the slot image.
  std::uint64_t slot_offset(std::uint64_t flat_offset) const {
    return in_bf16_run(flat_offset) ? flat_offset / 2 : flat_offset - float32_bytes / 2;
  }
};

// flat (uint8, the FlatParams buffer) -> its slot image at dst (slot_bytes() bytes on flat's device).
void pack_bf16_slot(const at::Tensor& flat, const Bf16SlotLayout& layout, std::byte* dst);
// A slot image at src (on flat's device) -> flat, each bfloat16 widened back to float32.
void unpack_bf16_slot(const std::byte* src, const Bf16SlotLayout& layout, const at::Tensor& flat);

}  // namespace tandem
