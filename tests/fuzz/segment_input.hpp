// What every segment fuzz target does with its bytes: make them a /dev/shm object of this process's
// own (a unique name, removed when the handle goes, whatever the outcome), so the real attach reads
// them exactly as it reads a segment another process wrote.
//
// Input: one flags byte, then up to 4096 bytes of header page (the SegmentHeader and the kind's
// descriptor, zero-padded), then the payload's bytes, written at byte 2 MiB. Flags:
//   bit 0  sign the header: magic, kind, layout version, ready = 1, total_size = the object's size
//          and a correct header_checksum, so the fuzzer reaches the descriptor checks behind them
//   bit 1  payload_offset = 2 MiB (else whatever the input says)
//   bits 4-6  N: the object is N x 2 MiB longer than its bytes (sparse zeros), room for slots
// One thread per process (libFuzzer calls LLVMFuzzerTestOneInput serially).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "shm/segment.hpp"

namespace tandem::fuzz {

class SegmentFromBytes {
 public:
  SegmentFromBytes(const std::string& name, shm::Kind kind, std::uint32_t layout, const std::uint8_t* data,
                   std::size_t size);
  ~SegmentFromBytes();
  SegmentFromBytes(const SegmentFromBytes&) = delete;
  SegmentFromBytes& operator=(const SegmentFromBytes&) = delete;

 private:
  std::string name_;
};

// "fuzz<pid>": unique per fuzzing process, valid as a dataset or job name.
std::string own_name();

// Reads every byte of [p, p + n) so ASan checks that all of it is mapped; returns a sum to keep the
// reads from being optimised away.
std::uint64_t touch(const void* p, std::size_t n);

}  // namespace tandem::fuzz
