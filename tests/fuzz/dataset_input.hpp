// What every dataset fuzz target does with its bytes: split them into the files of one dataset
// folder, plan the preload exactly as `tandem data preload` would, and run the plan's jobs into
// heap buffers the size of the planned fields (instead of a shm segment, so ASan sees every write).
// A UserError is an accepted outcome; anything else (another exception, a crash, a leak, a field
// too big for what the input can hold, libFuzzer's -malloc_limit_mb) is a finding.
//
// One thread per process (libFuzzer calls LLVMFuzzerTestOneInput serially); the folder is this
// process's own, so parallel fuzzers (-jobs, -fork) never share files.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace tandem::fuzz {

// The input as two files: a little-endian u16 n, then n bytes of the first file, the rest the
// second (either may be empty, so missing or empty files are inputs too).
struct TwoFiles {
  std::string_view first, second;
};
TwoFiles split_input(const std::uint8_t* data, std::size_t size);

// A temporary folder of this process's own, removed at exit; plan_and_load empties it when done.
const std::filesystem::path& input_dir();
void write_file(const std::string& name, std::string_view bytes);

// plan_load(input_dir(), format), then every job into heap buffers; traps when a planned field
// exceeds `max_field_bytes` (what the input can honestly hold).
void plan_and_load(const std::string& format, std::uint64_t max_field_bytes);

}  // namespace tandem::fuzz
