// C++ exceptions -> Python exceptions carrying the same one-line message. A UserError's class comes
// from its kind (common/error.hpp), set where it is thrown, never from the words of its message: a
// reworded message keeps its class. A CallError is a tandem.SystemCallError.
#include <torch/csrc/autograd/python_variable.h>  // before pybind11: the at::Tensor caster

#include <array>
#include <cstddef>
#include <string>
#include <string_view>

#include "common/error.hpp"
#include "python/bindings/module.hpp"

namespace tandem::python {
namespace {

struct KindClass {
  ErrorKind kind;
  std::string_view name;    // as _raise_error takes it (tests)
  const char* error_class;  // in tandem.errors; nullptr: the built-in TimeoutError
};

// One row per kind, in the enum's order.
constexpr std::array kClasses = {
    KindClass{ErrorKind::general, "general", "Error"},
    KindClass{ErrorKind::no_space, "no_space", "NoSpaceError"},
    KindClass{ErrorKind::owner, "owner", "OwnerError"},
    KindClass{ErrorKind::segment_not_found, "segment_not_found", "SegmentNotFoundError"},
    KindClass{ErrorKind::segment_exists, "segment_exists", "SegmentExistsError"},
    KindClass{ErrorKind::foreign_segment, "foreign_segment", "ForeignSegmentError"},
    KindClass{ErrorKind::corrupt_segment, "corrupt_segment", "CorruptSegmentError"},
    KindClass{ErrorKind::dtype, "dtype", "DTypeError"},
    KindClass{ErrorKind::shape, "shape", "ShapeError"},
    KindClass{ErrorKind::not_in_job, "not_in_job", "NotInJobError"},
    KindClass{ErrorKind::timeout, "timeout", nullptr},
};

constexpr bool one_row_per_kind_in_order() {
  for (std::size_t i = 0; i < kClasses.size(); ++i)
    if (static_cast<std::size_t>(kClasses[i].kind) != i) return false;
  return static_cast<std::size_t>(kClasses.back().kind) == static_cast<std::size_t>(ErrorKind::timeout);
}
static_assert(one_row_per_kind_in_order(), "kClasses needs one row per ErrorKind, in the enum's order");

void set_error(const char* error_class, const char* message) {
  // Looked up on each error (errors are not a hot path); tandem.errors is imported by tandem/__init__.
  // A class attribute of an imported module stays alive while the interpreter does.
  PyErr_SetString(py::module_::import("tandem.errors").attr(error_class).ptr(), message);
}

void set_user_error(const UserError& e) {
  const KindClass& row = kClasses[static_cast<std::size_t>(e.kind())];
  if (row.error_class == nullptr) PyErr_SetString(PyExc_TimeoutError, e.what());
  else set_error(row.error_class, e.what());
}

}  // namespace

void bind_errors(py::module_& m) {
  // NOLINTNEXTLINE(performance-unnecessary-value-param): pybind11's translator type takes it by value
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const UserError& e) {
      set_user_error(e);
    } catch (const CallError& e) {
      set_error("SystemCallError", e.what());
    }
  });
  py::list kinds;
  for (const KindClass& row : kClasses) kinds.append(std::string(row.name));
  m.attr("_error_kinds") = kinds;
  m.def(
      "_raise_error",
      [](std::string_view kind, const std::string& message) {
    for (const KindClass& row : kClasses)
      if (row.name == kind) throw UserError(message, row.kind);
    fail("_raise_error: no error kind '{}': use one of _error_kinds", kind);
      },
      py::arg("kind"), py::arg("message"), "raises a UserError of `kind` carrying `message` (for tests)");
}

}  // namespace tandem::python
