#include "python/bindings/arguments.hpp"

#include <torch/csrc/autograd/python_variable.h>  // before pybind11: the at::Tensor caster

#include <cmath>
#include <string>

#include "common/error.hpp"
#include "common/settings/actor.hpp"
#include "learner/feed/feed_options.hpp"
#include "shm/experience_ring_format.hpp"
#include "shm/weight_slab.hpp"

namespace tandem::python {
namespace {

// A bound as a person reads it: 2**64-1 rather than twenty digits.
std::string bound_text(const py::int_& bound) {
  const py::int_ next(py::reinterpret_steal<py::object>(PyNumber_Add(bound.ptr(), py::int_(1).ptr())));
  const auto bits = next.attr("bit_length")().cast<int>() - 1;
  if (bits >= 31 && next.equal(py::int_(1).attr("__lshift__")(bits))) return fmt::format("2**{}-1", bits);
  return py::repr(bound).cast<std::string>();
}

// The value as the message shows it: its repr, on one line, cut to a readable length.
std::string shown(py::handle value) {
  std::string text = py::repr(value).cast<std::string>();
  for (char& c : text)
    if (c == '\n' || c == '\r') c = ' ';
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return text;
}

}  // namespace

py::int_ integer_argument(py::handle value, std::string_view what, py::int_ lo, py::int_ hi) {
  const std::string range = fmt::format("an integer in {}..{}", bound_text(lo), bound_text(hi));
  if (PyBool_Check(value.ptr()) || PyFloat_Check(value.ptr()) || !PyIndex_Check(value.ptr()))
    fail("{}={} is not an integer: use {}", what, shown(value), range);
  PyObject* index = PyNumber_Index(value.ptr());
  if (index == nullptr) {
    PyErr_Clear();
    fail("{}={} is not an integer: use {}", what, shown(value), range);
  }
  py::int_ v = py::reinterpret_steal<py::int_>(index);
  if (PyObject_RichCompareBool(v.ptr(), lo.ptr(), Py_LT) == 1 ||
      PyObject_RichCompareBool(v.ptr(), hi.ptr(), Py_GT) == 1)
    fail("{}={} is out of range: use {}", what, shown(value), range);
  return v;
}

namespace {
std::optional<double> as_number(py::handle value) {
  if (PyBool_Check(value.ptr()) || PyUnicode_Check(value.ptr()) || PyBytes_Check(value.ptr())) return std::nullopt;
  if (!PyFloat_Check(value.ptr()) && !PyIndex_Check(value.ptr()) &&
      PyObject_HasAttrString(value.ptr(), "__float__") != 1)
    return std::nullopt;
  const double d = PyFloat_AsDouble(value.ptr());
  if (d == -1.0 && PyErr_Occurred()) {
    PyErr_Clear();
    return std::nullopt;
  }
  return d;
}
}  // namespace

double number_argument(py::handle value, std::string_view what) {
  const std::optional<double> d = as_number(value);
  if (!d) fail("{}={} is not a number: use an int or a float", what, shown(value));
  return *d;
}

std::optional<double> seconds_argument(py::handle value, std::string_view what) {
  if (value.is_none()) return std::nullopt;
  const double s = as_number(value).value_or(-1.0);
  if (!(s >= 0) || !std::isfinite(s))
    fail("{}={} is not a duration: use seconds as a finite number >= 0, or None to wait without a limit", what,
         shown(value));
  return s;
}

void bind_arguments(py::module_& m) {
  // The C++ components' bounds, by the option's name in the package, so that the wrappers check
  // against the very numbers the components enforce (one home for each rule).
  py::dict limits;
  limits["slab_slots"] = py::make_tuple(2, shm::kMaxSlots);
  limits["slab_leases"] = py::make_tuple(1, shm::kMaxLeases);
  limits["slab_version"] = py::make_tuple(0, shm::kMaxVersion - 1);
  limits["ring_actors"] = py::make_tuple(1, shm::kMaxRingActors);
  limits["ring_slots"] = py::make_tuple(1, shm::kMaxRingSlots);
  limits["ring_dim"] = py::make_tuple(1, shm::kMaxRingDim);
  limits["feed_ring_slots"] = py::make_tuple(2, feed::kMaxStagingSlots);
  limits["feed_workers"] = py::make_tuple(0, feed::kMaxFeedWorkers);
  limits["num_envs"] = py::make_tuple(1, EnvSettings::kMaxEnvs);  // tandem.envs.make, as env.envs
  limits["env_threads"] = py::make_tuple(1, EnvSettings::kMaxThreads);
  m.attr("LIMITS") = limits;

  m.def(
      "check_integer",
      [](std::string_view what, py::handle value, py::int_ lo, py::int_ hi) {
    return integer_argument(value, what, std::move(lo), std::move(hi));
      },
      py::arg("what"), py::arg("value"), py::arg("lo"), py::arg("hi"),
      "value as an int in [lo, hi], else a tandem.Error naming `what`, the value and the range");
  m.def(
      "check_seconds", [](std::string_view what, py::handle value) { return seconds_argument(value, what); },
      py::arg("what"), py::arg("value"), "None, or a finite number of seconds >= 0; else a tandem.Error naming `what`");
}

}  // namespace tandem::python
