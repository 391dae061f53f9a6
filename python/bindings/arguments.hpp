// Arguments as Python users pass them, checked before anything is made: every integer option (a
// batch, a seed, a rank, a ring size, a policy version) and every timeout of the package goes through
// here, from the wrappers in tandem/*.py (_tandem.check_integer, _tandem.check_seconds) or from a
// binding's own setter. A wrong one is a tandem.Error in one line that names the option, its value
// and the allowed range, never pybind's "incompatible function arguments" with a C++ signature, and
// never an allocation of a size that cannot exist (std::bad_alloc as MemoryError).
//
// Accepted integers: int and anything with __index__ (numpy integers, 0-d integer tensors); not bool
// (True as a batch size is a bug) and not float (2.0 as a count would hide a division). Called with
// the GIL held.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string_view>

#include "python/bindings/module.hpp"

namespace tandem::python {

// `value` as a Python int in [lo, hi]; tandem.Error naming `what` otherwise.
py::int_ integer_argument(py::handle value, std::string_view what, py::int_ lo, py::int_ hi);

template <class T>
T integer_as(py::handle value, std::string_view what, T lo = std::numeric_limits<T>::min(),
             T hi = std::numeric_limits<T>::max()) {
  return integer_argument(value, what, py::int_(lo), py::int_(hi)).template cast<T>();
}

// None, or seconds as a finite number >= 0.
std::optional<double> seconds_argument(py::handle value, std::string_view what);
// A real number (anything with __float__ but a str or bool; NaN and infinities pass: a loss may be one).
double number_argument(py::handle value, std::string_view what);


}  // namespace tandem::python
