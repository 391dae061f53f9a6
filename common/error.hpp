// Tandem's error policy, one per layer:
//  - UserError: something the user can fix (bad input, config, a stale segment). Its message is one
//    line that names the thing and the fix; main() prints it as `tandem: <message>` and exits 1.
//  - std::system_error from TANDEM_CHECK_SYS: a system call failed; the message carries the call,
//    strerror, file:line and pid. Library calls (CUDA, NCCL) have their own macros with the same shape
//    in cuda.hpp / nccl.hpp.
//  - Hot paths return [[nodiscard]] results instead of throwing.
#pragma once

#include <fmt/format.h>

#include <functional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace tandem {

class UserError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

template <class... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw UserError(fmt::format(format, std::forward<Args>(args)...));
}

// Throws std::system_error(err) whose message reads "<call> failed at <file>:<line> (pid N): <strerror>".
[[noreturn]] void throw_system_error(int err, std::string_view call, const char* file, int line);

// Runs a program's body and turns every exception into one line on stderr and an exit code:
// the body's own code on success, 1 for a UserError, 70 (EX_SOFTWARE) for anything else.
// Command lines are parsed (CLI11_PARSE) before the body runs.
int run_main(std::string_view program, const std::function<int()>& body);

}  // namespace tandem

// For calls that return -1 and set errno.
#define TANDEM_CHECK_SYS(expr)                                                   \
  do {                                                                           \
    if ((expr) == -1) ::tandem::throw_system_error(errno, #expr, __FILE__, __LINE__); \
  } while (0)
