#include "common/clock.hpp"

#include <time.h>

namespace tandem {
namespace {

std::uint64_t read_ns(clockid_t clock) {
  timespec ts{};
  ::clock_gettime(clock, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<std::uint64_t>(ts.tv_nsec);
}

}  // namespace

std::uint64_t monotonic_ns() { return read_ns(CLOCK_MONOTONIC); }
std::uint64_t unix_ns() { return read_ns(CLOCK_REALTIME); }

}  // namespace tandem
