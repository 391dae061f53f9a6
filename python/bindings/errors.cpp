// C++ exceptions -> tandem.Error subclasses (errors.hpp). The components raise one UserError type
// with a message that names the segment and the fix; which kind of failure it is shows in fixed
// phrases of those messages (shm/segment.cpp and each kind's attach), so the table below keys on
// them. tests (python/tests/test_errors.py) pin one message per class, so a reworded message that
// no longer matches fails a test rather than silently turning into the base class.
#include <torch/csrc/autograd/python_variable.h>  // before pybind11: the at::Tensor caster

#include <array>
#include <string_view>

#include "python/bindings/errors.hpp"
#include "python/bindings/module.hpp"

namespace tandem::python {
namespace {

struct Phrase {
  std::string_view text;
  const char* error_class;
};

// First match wins: the more specific phrases come first.
constexpr std::array kPhrases = {
    Phrase{"not enough shared memory", "NoSpaceError"},
    Phrase{"not by this user", "OwnerError"},
    Phrase{"does not exist", "SegmentNotFoundError"},
    Phrase{"was removed while", "SegmentNotFoundError"},  // a publisher's slab, removed under it
    Phrase{"did not appear", "SegmentNotFoundError"},
    Phrase{"already exists", "SegmentExistsError"},
    Phrase{"cannot be replaced", "SegmentExistsError"},
    Phrase{"is being written by live process", "SegmentExistsError"},
    Phrase{"not a Tandem segment", "ForeignSegmentError"},
    Phrase{" segment, not a ", "ForeignSegmentError"},
    Phrase{"was written by layout", "ForeignSegmentError"},
    Phrase{"has signature", "ShapeError"},      // a follower's model differs from the slab's
    Phrase{"no longer matches", "ShapeError"},  // a model converted after its publisher or follower was made
    Phrase{"corrupt", "CorruptSegmentError"},
    Phrase{"is truncated", "CorruptSegmentError"},
    Phrase{"is not ready", "CorruptSegmentError"},
    Phrase{"is invalid", "CorruptSegmentError"},
    Phrase{"invalid descriptor", "CorruptSegmentError"},
    Phrase{"bad descriptor", "CorruptSegmentError"},
    Phrase{"inconsistent descriptor", "CorruptSegmentError"},
    Phrase{"but its header says", "CorruptSegmentError"},
    Phrase{"payload offset", "CorruptSegmentError"},
    Phrase{"which no writer produces", "CorruptSegmentError"},
    Phrase{"out of place", "CorruptSegmentError"},
    Phrase{"unterminated", "CorruptSegmentError"},
    Phrase{" bytes but the segment has ", "CorruptSegmentError"},
};

PyObject* error_class(const char* name) {
  // Looked up on each error (errors are not a hot path); tandem.errors is imported by tandem/__init__.
  py::object cls = py::module_::import("tandem.errors").attr(name);
  return cls.ptr();  // a class attribute of an imported module: alive while the interpreter is
}

void set_error(const char* name, const char* message) { PyErr_SetString(error_class(name), message); }

}  // namespace

const char* error_class_of(const std::string& message) {
  for (const Phrase& p : kPhrases)
    if (message.find(p.text) != std::string::npos) return p.error_class;
  return "Error";
}

void bind_errors(py::module_& m) {
  // NOLINTNEXTLINE(performance-unnecessary-value-param): pybind11's translator type takes it by value
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const WaitTimeout& e) {
      PyErr_SetString(PyExc_TimeoutError, e.what());
    } catch (const DTypeError& e) {
      set_error("DTypeError", e.what());
    } catch (const ShapeError& e) {
      set_error("ShapeError", e.what());
    } catch (const NotInJobError& e) {
      set_error("NotInJobError", e.what());
    } catch (const UserError& e) {
      set_error(error_class_of(e.what()), e.what());
    } catch (const CallError& e) {
      set_error("SystemCallError", e.what());
    }
  });
  m.def(
      "_error_class_of", [](const std::string& message) { return std::string(error_class_of(message)); },
      "the tandem.errors class a C++ message maps to (for tests)");
}

}  // namespace tandem::python
