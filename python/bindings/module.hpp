// The `tandem._tandem` extension: one bind_* function per part, each in its own file, all called once
// from PYBIND11_MODULE (module.cpp). The pure-Python package (python/tandem/) wraps what these bind
// in PyTorch's idiom: iterators, context managers, keyword arguments.
//
// Rules every binding follows:
//  * Tensors cross as torch.Tensor through LibTorch's own Python bindings (the at::Tensor caster of
//    torch/csrc/utils/pybind.h, i.e. THPVariable_Wrap / THPVariable_Unpack): never a copy, never a list.
//  * A call that can wait (a batch, a version, a ring slot, a preload) releases the GIL while it waits.
//  * C++ errors reach Python as tandem.Error subclasses carrying the C++ one-line message (errors.cpp).
#pragma once

#include <pybind11/pybind11.h>

namespace tandem::python {

namespace py = pybind11;

void bind_errors(py::module_& m);
void bind_arguments(py::module_& m);  // arguments.hpp
void bind_dataset(py::module_& m);
void bind_feeds(py::module_& m);
void bind_publisher(py::module_& m);
void bind_follower(py::module_& m);
void bind_rings(py::module_& m);
void bind_job(py::module_& m);
void bind_envs(py::module_& m);        // envs.cpp: the C++ vector env for tandem.envs
void bind_async_envs(py::module_& m);  // async_envs.cpp: its asynchronous form
void bind_testing(py::module_& m);

}  // namespace tandem::python
