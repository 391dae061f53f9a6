#include "python/bindings/model_owners.hpp"

#include <torch/csrc/autograd/python_variable.h>  // before pybind11: the at::Tensor caster

#include "common/error.hpp"
#include "common/quote.hpp"

namespace tandem::python {

ModelOwners::ModelOwners(const FlatParams& params, const py::dict& owners) {
  for (std::size_t i = 0; i < params.table().size(); ++i) {
    const py::str name(params.table()[i].name);
    if (!owners.contains(name)) continue;
    const auto where = owners[name].cast<py::tuple>();
    if (where.size() != 2 || !PyDict_Check(where[0].ptr()))
      throw std::invalid_argument("ModelOwners: each owner is a (dict, key) pair");
    py::object dict = where[0], key = where[1];
    owners_.push_back({dict, key, py::reinterpret_borrow<py::object>(dict[key]), i});
  }
}

void ModelOwners::check(const FlatParams& params, const std::function<void(std::size_t, const at::Tensor&)>& adopt) {
  for (Owner& o : owners_) {
    PyObject* now = PyDict_GetItemWithError(o.dict.ptr(), o.key.ptr());  // borrowed
    if (now == o.held.ptr()) continue;
    if (now == nullptr && PyErr_Occurred()) throw py::error_already_set();
    const std::string& name = params.table()[o.index].name;
    if (now == nullptr || !THPVariable_Check(now))
      fail(ErrorKind::shape,
           "model tensor {} no longer matches the layout it was flattened into: the model holds {} under that name "
           "now; keep the model's tensors, or close this publisher or follower and make a new one",
           quote_escaped(name),
           now == nullptr   ? std::string("nothing")
           : now == Py_None ? std::string("None")
                            : fmt::format("a {}", Py_TYPE(now)->tp_name));
    adopt(o.index, THPVariable_Unpack(now));
    o.held = py::reinterpret_borrow<py::object>(now);
  }
}

}  // namespace tandem::python
