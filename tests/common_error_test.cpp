// The error family (common/error.hpp): one CallError for system, CUDA and NCCL calls, carrying the
// call, the library's string, file:line, pid and host; a UserError's kind; run_main's exit codes.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "common/cuda.hpp"
#include "common/error.hpp"
#include "common/process.hpp"
#include "common/units.hpp"
#ifdef TANDEM_HAVE_NCCL
#include "common/nccl.hpp"
#endif

using namespace tandem;

namespace {
template <class Fn>
std::string call_error_of(Fn&& fn, std::string* library = nullptr, int* code = nullptr) {
  try {
    fn();
  } catch (const CallError& e) {
    if (library) *library = e.library();
    if (code) *code = e.code();
    return e.what();
  }
  return "";
}
bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }
}  // namespace

TEST_CASE("errors: a failed system call names the call, strerror, file:line, pid and host") {
  std::string library;
  int code = 0;
  const std::string message = call_error_of([] { TANDEM_CHECK_SYS(::open("/nonexistent/tandem", O_RDONLY)); }, &library,
                                            &code);
  CHECK(library == "system");
  CHECK(code == ENOENT);
  CHECK(contains(message, "::open(\"/nonexistent/tandem\", O_RDONLY) failed: No such file or directory"));
  CHECK(contains(message, "common_error_test.cpp:"));
  CHECK(contains(message, "pid " + std::to_string(::getpid())));
  CHECK(contains(message, "on " + host_name()));
  CHECK_FALSE(contains(message, "\n"));
}

TEST_CASE("errors: calls that return an errno value and failures found by hand use the same shape") {
  int code = 0;
  CHECK(
      contains(call_error_of([] { TANDEM_CHECK_RC(EAGAIN); }, nullptr, &code), "EAGAIN failed: Resource temporarily"));
  CHECK(code == EAGAIN);
  CHECK(
      contains(call_error_of([] { TANDEM_FAIL_SYS(EBADF, "mmap(/dev/shm/x)"); }), "mmap(/dev/shm/x) failed: Bad file"));
  CHECK(call_error_of([] {
          TANDEM_CHECK_SYS(0);
          TANDEM_CHECK_RC(0);
        }).empty());
}

TEST_CASE("errors: a failed CUDA call is a CallError with the runtime's string") {
  std::string library;
  const std::string message = call_error_of(
      [] {
    const int memory_allocation_status = 2;  // cudaErrorMemoryAllocation
    TANDEM_CUDA_CHECK(memory_allocation_status);
      },
      &library);
  CHECK(library == "CUDA");
  CHECK(contains(message, "memory_allocation_status failed: "));
  if (cuda::compiled()) CHECK(contains(message, "out of memory"));
}

#ifdef TANDEM_HAVE_NCCL
TEST_CASE("errors: a failed NCCL call is a CallError with ncclGetErrorString") {
  std::string library;
  int code = 0;
  const std::string message = call_error_of([] { TANDEM_NCCL_CHECK(ncclInvalidArgument); }, &library, &code);
  CHECK(library == "NCCL");
  CHECK(code == static_cast<int>(ncclInvalidArgument));
  CHECK(contains(message, "ncclInvalidArgument failed: invalid argument"));
  CHECK(call_error_of([] { TANDEM_NCCL_CHECK(ncclInProgress); }).empty());
}
#endif

TEST_CASE(
    "errors: run_main exits 1 for a UserError, 70 for a CallError or anything else, and the body's code otherwise") {
  CHECK(run_main("t", [] { return 3; }) == 3);
  CHECK(run_main("t", []() -> int { fail("bad value: fix it"); }) == 1);
  CHECK(run_main("t", []() -> int { fail(ErrorKind::corrupt_segment, "segment 'x' is corrupt: fix it"); }) == 1);
  CHECK(run_main("t", []() -> int { TANDEM_FAIL_SYS(EIO, "read"); }) == 70);
  CHECK(run_main("t", []() -> int { throw std::logic_error("bug"); }) == 70);
}

TEST_CASE("errors: a UserError carries the kind it was raised with, general when fail() names none") {
  auto kind_of = [](auto raise) {
    try {
      raise();
    } catch (const UserError& e) {
      return e.kind();
    }
    return ErrorKind::timeout;  // not raised: no kind below expects this one
  };
  CHECK(kind_of([] { fail("segment 'x' is corrupt and does not exist: fix it"); }) == ErrorKind::general);
  CHECK(kind_of([] { fail(ErrorKind::segment_not_found, "segment '{}' is gone: fix it", "x"); }) ==
        ErrorKind::segment_not_found);
  CHECK(kind_of([] { throw UserError("a shape: fix it", ErrorKind::shape); }) == ErrorKind::shape);
}

TEST_CASE("units: sizes parse with one rule (K, M, G, T are powers of 1024) and print the same way") {
  struct Row {
    const char* text;
    std::uint64_t bytes;
  };
  for (const Row& row :
       {Row{"4096", 4096}, Row{"64K", 65536}, Row{"64KiB", 65536}, Row{"64 kb", 65536}, Row{"1.5M", 1572864},
        Row{"2G", 2147483648ull}, Row{"2gib", 2147483648ull}, Row{"1T", 1ull << 40}, Row{"0", 0}, Row{"7B", 7}}) {
    CAPTURE(row.text);
    CHECK(parse_size(row.text, "TEST_SIZE") == row.bytes);
  }
  for (const char* bad : {"", "M", "12Q", "-1K", "nan", "inf", "1e30G", "1..2M"}) {
    CAPTURE(bad);
    const std::string message = [&] {
      try {
        parse_size(bad, "TEST_SIZE");
      } catch (const UserError& e) {
        return std::string(e.what());
      }
      return std::string();
    }();
    CHECK(contains(message, "TEST_SIZE = \""));
  }
  CHECK(format_bytes(0) == "0 B");
  CHECK(format_bytes(1023) == "1023 B");
  CHECK(format_bytes(1536) == "1.5 KiB");
  CHECK(format_bytes(605ull << 20) == "605.0 MiB");
  CHECK(format_bytes(parse_size("2G", "x")) == "2.0 GiB");
}
