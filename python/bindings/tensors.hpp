// Tensors over memory Tandem maps (a dataset cache, a leased weight slot, a ring slot), without a
// copy: a view's deleter holds a reference to the mapping's owner, so the tensor and every view of it
// keep the segment mapped after the Python object that made it is gone. The owner is type-erased
// (std::shared_ptr<const void>); its destructor may run on any thread, with or without the GIL, so
// owners only unmap and release (no Python calls).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "shm/dtype.hpp"

namespace tandem::python {

// The torch dtype of a format dtype; DTypeError naming `what` for one torch lacks (uint16 and uint32
// before torch 2.3).
at::ScalarType scalar_type_of(shm::DType dtype, std::string_view what);
// The format dtype of a torch dtype; DTypeError naming `what` when the formats have none (bool, complex).
shm::DType format_dtype_of(at::ScalarType type, std::string_view what);

// A C-contiguous view of `data` (shape and dtype as given) that keeps `owner` alive.
at::Tensor view_of(std::shared_ptr<const void> owner, const std::byte* data, const std::vector<std::int64_t>& shape,
                   at::ScalarType dtype);

// Named tensors as Python hands them over: module.named_parameters() + named_buffers().
using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

}  // namespace tandem::python
