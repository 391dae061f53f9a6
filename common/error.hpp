// Tandem's error policy: two exception types and one family of checking macros.
//
//  - UserError: something the user can fix (bad input, a config value, a stale segment, no GPU). Its
//    message is one line that names the thing and the fix; run_main prints `<program>: <message>`
//    and exits 1, whatever its kind. Raise it with fail("...") or, where the failure is one a caller
//    (Python) tells apart by its exception class, fail(ErrorKind::..., "...").
//  - CallError: a call into the system, the CUDA runtime or NCCL failed in a way the user cannot fix
//    from the message alone. It carries the call's text, the library's own error string and code,
//    file:line, pid and host, so one line from any rank of any node says where and what. run_main
//    exits 70 (EX_SOFTWARE) for it. Raise it through the macros:
//      TANDEM_CHECK_SYS(expr)          expr returns -1 and sets errno (open, mmap's callers, dup, ...)
//      TANDEM_CHECK_RC(expr)           expr returns 0 or an errno value (posix_fallocate, pthread_*)
//      TANDEM_FAIL_SYS(err, what)      a failure found by hand (MAP_FAILED, a short read): errno `err`
//      TANDEM_CUDA_CHECK(expr)         in common/cuda.hpp
//      TANDEM_NCCL_CHECK(expr)         in common/nccl.hpp
//    A library condition the user can fix (no device, a pinned registration refused) is turned into a
//    UserError at the place that knows the fix, not here.
//  - Hot paths return [[nodiscard]] results instead of throwing.
#pragma once

#include <fmt/format.h>

#include <cerrno>
#include <functional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace tandem {

// What kind of UserError it is, set where it is thrown: python/bindings/errors.cpp maps each kind to
// one Python exception class (tandem.errors; timeout to the built-in TimeoutError), never the words
// of the message. A new kind needs its row there (a static_assert checks one row per kind, counting
// up to timeout, the last) and its class in python/tandem/errors.py.
enum class ErrorKind {
  general,            // anything else: a config value, an argument, a missing file
  no_space,           // /dev/shm has too little room for a segment
  owner,              // a segment belongs to another user
  segment_not_found,  // a segment does not exist (or was removed, or never appeared)
  segment_exists,     // a segment's name is taken (by a cache, or a slab whose writer runs)
  foreign_segment,    // the name holds something else: not Tandem's, another kind, another layout
  corrupt_segment,    // a segment is damaged or unfinished: a header, a descriptor, a checksum
  dtype,              // a tensor's dtype does not fit a segment, or torch lacks the segment's
  shape,              // a tensor or model does not match a segment: a shape, a count, a signature
  not_in_job,         // tandem.job() in a program that `tandem run` did not start
  timeout,            // a wait given a timeout ran out; stays last
};

class UserError : public std::runtime_error {
 public:
  explicit UserError(const std::string& message, ErrorKind kind = ErrorKind::general)
      : std::runtime_error(message), kind_(kind) {}
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

template <class... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw UserError(fmt::format(format, std::forward<Args>(args)...));
}

template <class... Args>
[[noreturn]] void fail(ErrorKind kind, fmt::format_string<Args...> format, Args&&... args) {
  throw UserError(fmt::format(format, std::forward<Args>(args)...), kind);
}

// Where a failed call was made; the macros fill it in.
struct CallSite {
  const char* file;
  int line;
};

class CallError : public std::runtime_error {
 public:
  // library: "system", "CUDA" or "NCCL"; code: errno, cudaError_t or ncclResult_t; detail: the
  // library's string for that code. The message reads
  //   "<call> failed: <detail> (<library> error <code>) at <file>:<line>, pid <pid> on <host>".
  CallError(std::string_view library, int code, std::string_view detail, std::string_view call, CallSite site);
  const std::string& library() const { return library_; }
  int code() const { return code_; }

 private:
  std::string library_;
  int code_;
};

[[noreturn]] void throw_errno_error(int err, std::string_view call, CallSite site);

// The first line of an exception's message: LibTorch's and c10d's errors carry a backtrace after it,
// noise inside a one-line message of ours.
std::string first_line(const std::exception& e);

// Runs a program's body and turns every exception into one line on stderr and an exit code:
// the body's own code on success, 1 for a UserError, 70 (EX_SOFTWARE) for anything else.
// Command lines are parsed (CLI11_PARSE) before the body runs.
int run_main(std::string_view program, const std::function<int()>& body);

}  // namespace tandem

#define TANDEM_CALL_SITE (::tandem::CallSite{__FILE__, __LINE__})

#define TANDEM_CHECK_SYS(expr)                                                     \
  do {                                                                             \
    if ((expr) == -1) ::tandem::throw_errno_error(errno, #expr, TANDEM_CALL_SITE); \
  } while (0)

#define TANDEM_CHECK_RC(expr)                                           \
  do {                                                                  \
    if (const int tandem_rc_ = (expr); tandem_rc_ != 0)                 \
      ::tandem::throw_errno_error(tandem_rc_, #expr, TANDEM_CALL_SITE); \
  } while (0)

#define TANDEM_FAIL_SYS(err, what) ::tandem::throw_errno_error((err), (what), TANDEM_CALL_SITE)
