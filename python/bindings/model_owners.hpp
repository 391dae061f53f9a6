// Where each flattened tensor of a Python model lives: the dict that holds it (a module's _parameters
// or _buffers, or the dict of tensors the user passed) and its key. FlatParams sees a tensor that was
// rebound in place (`p.data = t`, a module's dtype or device conversion of a parameter); this sees the
// rest: a tensor replaced by another object (`model.fc.weight = nn.Parameter(...)`, and every buffer a
// module conversion such as model.double() or model.to() makes anew), which FlatParams still holds
// the old object of. WeightPublisher and BoundModel check both before each publish or load, so that
// neither sends nor loads the bytes of a tensor the model no longer has.
//
// Threads: built and checked with the GIL held, by the thread that owns the publisher or follower.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <functional>
#include <vector>

#include "common/torch/flat_params.hpp"
#include "python/bindings/module.hpp"

namespace tandem::python {

class ModelOwners {
 public:
  ModelOwners() = default;
  // `owners`: tensor name -> (dict, key), as tandem/weights.py lists them; names it lacks (a model given
  // as (name, tensor) pairs) are checked by FlatParams alone.
  ModelOwners(const FlatParams& params, const py::dict& owners);

  // For each tensor whose dict now holds another object: adopt(table index, that tensor). A name that
  // holds no tensor any more (None, deleted, another type) is a tandem.ShapeError naming it. Cheap when
  // nothing changed: one dict lookup and a pointer comparison per tensor.
  void check(const FlatParams& params, const std::function<void(std::size_t, const at::Tensor&)>& adopt);

 private:
  struct Owner {
    py::object dict, key, held;  // held: the object adopted last
    std::size_t index;           // in the FlatParams table
  };
  std::vector<Owner> owners_;
};

}  // namespace tandem::python
