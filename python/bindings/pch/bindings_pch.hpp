// The headers every file of the extension (python/bindings/) parses: LibTorch's Python bridge (the
// at::Tensor caster), pybind11 with its STL casters, and the LibTorch core of common/torch/pch.
// Precompiled once for the extension by meson (`cpp_pch` in python/tandem/meson.build), with the
// extension's own flags (hidden visibility, the Python include path), which the build-wide LibTorch
// header does not share. Measured on a 2-core Debian machine (the developers' and CI's): these
// includes alone took 19.6 s of each of the 15 files, 300 CPU-s of a cold build. Each file still includes what it uses.
#include <torch/csrc/autograd/python_variable.h>  // before pybind11: the at::Tensor caster

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/nn/module.h>
#include <torch/types.h>
#include <torch/utils.h>
