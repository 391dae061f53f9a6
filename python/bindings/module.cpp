// PYBIND11_MODULE for tandem._tandem (module.hpp says what each part binds).
#include <torch/csrc/autograd/python_variable.h>  // before pybind11: the at::Tensor caster

#include "python/bindings/module.hpp"

PYBIND11_MODULE(_tandem, m) {
  using namespace tandem::python;
  // torch registers torch.Tensor with the interpreter when it is imported; a tensor made before that
  // could not be wrapped. tandem/__init__.py imports torch first; this covers `import tandem._tandem`.
  py::module_::import("torch");
  m.doc() = "Tandem's C++ components: use them through the `tandem` package";
  bind_errors(m);
  bind_arguments(m);
  bind_dataset(m);
  bind_feeds(m);
  bind_publisher(m);
  bind_follower(m);
  bind_rings(m);
  bind_job(m);
  bind_envs(m);
  bind_async_envs(m);
  bind_testing(m);
}
