// Clocks shared by every process of a job.
//
// monotonic_ns() is CLOCK_MONOTONIC, which Linux keeps system-wide: a value stored by one process
// (a heartbeat, a publish time in shared memory) can be compared with another process's reading.
// It is the clock of every *_ns field that compares times across processes. unix_ns() is the wall
// clock, for instants shown to people (when a segment or a job was created); it may jump.
// Both are safe to call from any thread and never fail.
#pragma once

#include <cstdint>

namespace tandem {

std::uint64_t monotonic_ns();
std::uint64_t unix_ns();

}  // namespace tandem
