// Small dataset files written by the tests themselves (IDX plain or gzip, CIFAR-10 batches, .npy),
// a temporary folder that removes itself, and a check for the "bad input" contract of the CLI.
#pragma once

#include <doctest/doctest.h>
#include <zlib.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/harness.hpp"

namespace tandem::test {

inline void write_bytes(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline void write_gzip(const std::filesystem::path& path, const std::string& bytes) {
  gzFile gz = ::gzopen(path.c_str(), "wb");
  ::gzwrite(gz, bytes.data(), static_cast<unsigned>(bytes.size()));
  ::gzclose(gz);
}

// Overwrites a gzip file's trailer ISIZE (uncompressed size mod 2^32), as a forger would.
inline void forge_gzip_trailer(const std::filesystem::path& path, std::uint32_t isize) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(-4, std::ios::end);
  const char le[4] = {char(isize), char(isize >> 8), char(isize >> 16), char(isize >> 24)};
  f.write(le, 4);
}

inline std::string big_endian32(std::uint32_t v) { return {char(v >> 24), char(v >> 16), char(v >> 8), char(v)}; }

// An IDX file: magic 0x0000080N, the dims, then `data` (count x H x W bytes, or count for labels).
inline std::string idx_bytes(const std::vector<std::uint32_t>& dims, const std::string& data, std::uint32_t magic = 0) {
  std::string out = big_endian32(magic ? magic : 0x800u | static_cast<std::uint32_t>(dims.size()));
  for (auto d : dims) out += big_endian32(d);
  return out + data;
}

// Pixel i of sample s (deterministic, so tests can check bytes after a round trip).
inline char pixel(std::uint64_t s, std::uint64_t i) { return static_cast<char>((s * 131 + i * 7) & 0xff); }

// Writes train (and t10k when test > 0) image/label files of h x w images, labels s % 10.
inline void write_idx_dataset(const std::filesystem::path& dir, std::uint32_t train, std::uint32_t test,
                              std::uint32_t h, std::uint32_t w, bool gz) {
  auto one = [&](const std::string& split, std::uint32_t n, std::uint32_t first) {
    std::string images, labels;
    for (std::uint32_t s = 0; s < n; ++s) {
      for (std::uint32_t i = 0; i < h * w; ++i) images += pixel(first + s, i);
      labels += static_cast<char>((first + s) % 10);
    }
    auto write = gz ? write_gzip : write_bytes;
    write(dir / (split + "-images-idx3-ubyte" + (gz ? ".gz" : "")), idx_bytes({n, h, w}, images));
    write(dir / (split + "-labels-idx1-ubyte" + (gz ? ".gz" : "")), idx_bytes({n}, labels));
  };
  one("train", train, 0);
  if (test > 0) one("t10k", test, train);
}

// `n` CIFAR-10 records: label (first + s) % 10, then 3072 pixel bytes.
inline std::string cifar_records(std::uint32_t n, std::uint32_t first) {
  std::string out;
  for (std::uint32_t s = 0; s < n; ++s) {
    out += static_cast<char>((first + s) % 10);
    for (std::uint32_t i = 0; i < 3072; ++i) out += pixel(first + s, i);
  }
  return out;
}

// A version-1 .npy file holding `data` with the given descr ('<f4') and shape.
inline std::string npy_bytes(const std::string& descr, const std::vector<std::uint64_t>& shape, const std::string& data,
                             bool fortran = false) {
  std::string dims;
  for (auto d : shape) dims += std::to_string(d) + ", ";
  if (shape.size() > 1) dims.resize(dims.size() - 2);  // numpy writes "(5,)" but "(5, 3)"
  else if (!shape.empty()) dims.resize(dims.size() - 1);
  std::string header = "{'descr': '" + descr + "', 'fortran_order': " + (fortran ? "True" : "False") + ", 'shape': (" +
                       dims + "), }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string out = "\x93NUMPY";
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>(header.size() >> 8);
  return out + header + data;
}

template <class T>
std::string raw(const std::vector<T>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
}

// `text` with every run of spaces made one space (for matching aligned table output).
inline std::string squeeze(const std::string& text) {
  std::string out;
  for (char c : text)
    if (c != ' ' || out.empty() || out.back() != ' ') out += c;
  return out;
}

// Runs `ENV tandem ARGS` and checks the bad-input contract: exit 1, exactly one line that starts with
// "tandem: " and contains `expected`, and no segment `segment` left in /dev/shm.
inline void check_one_line_error(const std::string& args, const std::string& expected, const std::string& segment,
                                 const std::string& env = "") {
  CommandResult r = run_command(env + " " + tandem_binary() + " " + args);
  INFO("tandem " << args << "\n" << r.output);
  CHECK(r.status == 1);
  CHECK(r.output.rfind("tandem: ", 0) == 0);
  CHECK(r.output.find('\n') == r.output.size() - 1);
  CHECK(r.output.find(expected) != std::string::npos);
  CHECK_FALSE(std::filesystem::exists("/dev/shm/" + segment));
}

}  // namespace tandem::test
