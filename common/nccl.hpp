// NCCL's member of the error family (common/error.hpp): TANDEM_NCCL_CHECK(expr) throws a CallError
// carrying the call, ncclGetErrorString, the result code, file:line, pid and host. Include only where
// NCCL is built in (TANDEM_HAVE_NCCL; meson's nccl_dep defines it).
#pragma once

#ifndef TANDEM_HAVE_NCCL
#error "common/nccl.hpp needs NCCL: depend on nccl_dep and guard the include with TANDEM_HAVE_NCCL"
#endif

#include <nccl.h>

#include "common/error.hpp"

namespace tandem::nccl {

[[noreturn]] inline void throw_nccl_error(ncclResult_t result, std::string_view call, CallSite site) {
  throw CallError("NCCL", static_cast<int>(result), ncclGetErrorString(result), call, site);
}

}  // namespace tandem::nccl

// ncclInProgress is not a failure: it is what non-blocking communicators return while they work.
#define TANDEM_NCCL_CHECK(expr)                                                       \
  do {                                                                                \
    if (const ncclResult_t tandem_nccl_result_ = (expr);                              \
        tandem_nccl_result_ != ncclSuccess && tandem_nccl_result_ != ncclInProgress)  \
      ::tandem::nccl::throw_nccl_error(tandem_nccl_result_, #expr, TANDEM_CALL_SITE); \
  } while (0)
