// Safetensors files (the format of Hugging Face's `safetensors`, readable by its Python package):
//
//   [0, 8)        N: the header's length, unsigned 64-bit little-endian
//   [8, 8 + N)    a JSON object, padded with spaces so that 8 + N is a multiple of 8:
//                   {"__metadata__": {"step": "1200", ...},          string -> string only
//                    "<tensor name>": {"dtype": "F32", "shape": [64, 3, 3, 3], "data_offsets": [B, E]}, ...}
//   [8 + N, end)  the byte buffer: each tensor's C-order little-endian bytes at [B, E) relative to
//                 the buffer's start; together the tensors cover the buffer exactly, with no gaps.
// dtypes: F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL. Tensors are laid out by element size, largest
// first, then by name (as the Python package does), so every tensor is aligned to its element size.
//
// save_file() writes atomically: a temporary file in the same directory, fsync, rename over the
// target, fsync of the directory; a crash leaves either the old file or the new one, never half.
// load_file() validates everything above; a truncated or corrupt file is one UserError line that
// names the file. Both may be called from any thread (they share no state).
#pragma once

#include <torch/types.h>

#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tandem::safetensors {

using Metadata = std::map<std::string, std::string>;
using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

struct Contents {
  NamedTensors tensors;  // CPU tensors, in file (offset) order
  Metadata metadata;
  std::string path;  // for error messages

  bool has(std::string_view name) const;
  const torch::Tensor& at(std::string_view name) const;  // UserError naming path and tensor
  const std::string& meta(std::string_view key) const;   // UserError naming path and key
};

// Tensors may live on any device and be non-contiguous: they are copied to CPU C-order bytes.
// Names must be unique and non-empty, and not "__metadata__".
std::string serialize(const NamedTensors& tensors, const Metadata& metadata);
Contents deserialize(std::string_view bytes, const std::string& what);

void save_file(const std::string& path, const NamedTensors& tensors, const Metadata& metadata);
Contents load_file(const std::string& path);

// Writes `bytes` to `path` atomically (temporary file, fsync, rename, fsync of the directory).
void write_file_atomically(const std::string& path, std::string_view bytes);

}  // namespace tandem::safetensors
