// Replaces the global operator new and delete of the test binary that includes this header, counting
// every heap allocation on every thread (workers included), so a test can check that a hot path
// allocates nothing. Include it in exactly one file of a binary.
#pragma once

#include <atomic>
#include <cstdlib>
#include <new>

// GCC at -O1 warns that free() releases what operator new returned, not knowing that operator new
// is this file's, which allocates with malloc: a false positive of -Wmismatched-new-delete.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

static std::atomic<long> allocations{0};

#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TANDEM_COUNT_THROUGH_SANITIZER 1
#endif
#endif

#ifdef TANDEM_COUNT_THROUGH_SANITIZER
// ThreadSanitizer's static runtime defines operator new itself (a duplicate symbol at link time), and
// its allocator serves malloc too: count through the hook it calls on every allocation instead.
extern "C" void __sanitizer_malloc_hook(const volatile void*, std::size_t) {
  allocations.fetch_add(1, std::memory_order_relaxed);
}
#else
void* operator new(std::size_t size) {
  allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
#endif
