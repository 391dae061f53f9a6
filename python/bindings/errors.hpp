// Errors the bindings raise themselves, beside the C++ components' UserError and CallError. The
// translator (errors.cpp) turns each into a Python exception carrying the same one-line message:
//   DTypeError, ShapeError       -> tandem.DTypeError, tandem.ShapeError (a tensor or model that does
//                                   not match the segment)
//   NotInJobError                -> tandem.NotInJobError (tandem.job() outside `tandem run`)
//   WaitTimeout                  -> the built-in TimeoutError (a wait given a timeout ran out)
//   any other UserError          -> the tandem.Error subclass its message names (errors.cpp's table)
//   CallError                    -> tandem.SystemCallError
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>
#include <utility>

#include "common/error.hpp"

namespace tandem::python {

class DTypeError : public UserError {
 public:
  using UserError::UserError;
};
class ShapeError : public UserError {
 public:
  using UserError::UserError;
};
class NotInJobError : public UserError {
 public:
  using UserError::UserError;
};
class WaitTimeout : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

template <class E, class... Args>
[[noreturn]] void raise(fmt::format_string<Args...> format, Args&&... args) {
  throw E(fmt::format(format, std::forward<Args>(args)...));
}

// The name of the tandem.errors class a C++ UserError message maps to ("Error" when none fits).
const char* error_class_of(const std::string& message);

}  // namespace tandem::python
