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
double thread_cpu_s() { return static_cast<double>(read_ns(CLOCK_THREAD_CPUTIME_ID)) * 1e-9; }
double process_cpu_s() { return static_cast<double>(read_ns(CLOCK_PROCESS_CPUTIME_ID)) * 1e-9; }

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double seconds_since(std::uint64_t start_monotonic_ns) {
  const std::uint64_t now = monotonic_ns();
  return now > start_monotonic_ns ? static_cast<double>(now - start_monotonic_ns) / 1e9 : 0.0;
}

}  // namespace tandem
