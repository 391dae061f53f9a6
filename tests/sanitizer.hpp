#pragma once

// Whether this binary runs under AddressSanitizer (GCC says so with a macro, clang with a feature
// test): its shadow reserves terabytes of address space, so a test cannot cap a child's with
// RLIMIT_AS there.
#if defined(__SANITIZE_ADDRESS__)
#define TANDEM_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TANDEM_TEST_ASAN 1
#endif
#endif
#ifndef TANDEM_TEST_ASAN
#define TANDEM_TEST_ASAN 0
#endif

namespace tandem::test {

inline constexpr bool kAddressSanitizer = TANDEM_TEST_ASAN != 0;

}  // namespace tandem::test
