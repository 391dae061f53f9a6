// Clocks shared by every process of a job.
//
// monotonic_ns() is CLOCK_MONOTONIC, which Linux keeps system-wide: a value stored by one process
// (a heartbeat, a publish time in shared memory) can be compared with another process's reading.
// It is the clock of every *_ns field that compares times across processes. unix_ns() is the wall
// clock, for instants shown to people (when a segment or a job was created); it may jump.
// seconds_since() measures a duration for a report: from a steady_clock time point (one process's
// timer) or from a monotonic_ns() reading (one that another process may have stored).
// thread_cpu_s() and process_cpu_s() are the CPU seconds the calling thread, or the whole process, has
// used (CLOCK_THREAD_CPUTIME_ID, CLOCK_PROCESS_CPUTIME_ID): what a benchmark divides work by.
// All are safe to call from any thread and never fail.
#pragma once

#include <chrono>
#include <cstdint>

namespace tandem {

std::uint64_t monotonic_ns();
std::uint64_t unix_ns();

double seconds_since(std::chrono::steady_clock::time_point start);
double seconds_since(std::uint64_t start_monotonic_ns);  // 0 for a reading later than now

double thread_cpu_s();
double process_cpu_s();

}  // namespace tandem
