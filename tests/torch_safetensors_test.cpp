#include <torch/types.h>
// After LibTorch: Debian's c10 pulls in glog, whose CHECK must not replace doctest's.
#include <doctest/doctest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/error.hpp"
#include "common/torch/safetensors.hpp"
#include "tests/harness.hpp"

namespace st = tandem::safetensors;
namespace fs = std::filesystem;

namespace {
using tandem::test::error_of;
using tandem::test::TempDir;

// A fresh directory under /tmp, removed with everything in it at scope exit.
// The tensors tests/safetensors_counterpart.py expects (its expected()).
st::NamedTensors counterpart_tensors() {
  return {
      {"weights", torch::arange(24, torch::kFloat32).reshape({2, 3, 4}) / 8},
      {"counts", torch::tensor({int64_t{1}, int64_t{-2}, int64_t{3} << 40})},
      {"pixels", torch::arange(10, torch::kUInt8)},
      {"half", torch::tensor({0.5, -1.25}).to(torch::kFloat16)},
      {"scalar", torch::tensor(3.25, torch::kFloat64)},
      {"empty", torch::zeros({0, 3}, torch::kInt32)},
  };
}
const st::Metadata kCounterpartMeta = {{"step", "1200"}, {"config", R"({"lr": 0.1})"}};

void check_counterpart_tensors(const st::Contents& c) {
  for (const auto& [name, want] : counterpart_tensors()) {
    const std::string& tensor = name;  // CAPTURE's lambda: clang before 16 cannot capture a structured binding
    CAPTURE(tensor);
    REQUIRE(c.has(name));
    const torch::Tensor& got = c.at(name);
    CHECK((got.scalar_type() == want.scalar_type()));
    CHECK(got.sizes() == want.sizes());
    CHECK(torch::equal(got, want));
  }
  CHECK(c.metadata == kCounterpartMeta);
}

std::string python() {
  const char* p = std::getenv("TANDEM_PYTHON");
  return p ? p : "/usr/bin/python3";
}

std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}
void write_bytes(const std::string& path, std::string_view bytes) {
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace

TEST_CASE("safetensors: every dtype, shape and the metadata survive a round trip") {
  TempDir dir;
  st::NamedTensors tensors = counterpart_tensors();
  tensors.emplace_back("bf16", torch::tensor({1.5, -2.0}).to(torch::kBFloat16));
  tensors.emplace_back("flags", torch::tensor({true, false, true}));
  tensors.emplace_back("i16", torch::tensor({-3, 4}).to(torch::kInt16));
  tensors.emplace_back("i8", torch::tensor({-7}).to(torch::kInt8));
  tensors.emplace_back("transposed", torch::arange(6, torch::kFloat32).reshape({2, 3}).t());  // not contiguous
  st::save_file(dir.file("a.safetensors"), tensors, kCounterpartMeta);

  st::Contents c = st::load_file(dir.file("a.safetensors"));
  CHECK(c.tensors.size() == tensors.size());
  for (const auto& [name, want] : tensors) {
    const std::string& tensor = name;  // CAPTURE's lambda: clang before 16 cannot capture a structured binding
    CAPTURE(tensor);
    CHECK((c.at(name).scalar_type() == want.scalar_type()));
    CHECK(torch::equal(c.at(name), want.contiguous()));
  }
  CHECK(c.metadata == kCounterpartMeta);
  CHECK(c.meta("step") == "1200");
}

TEST_CASE("safetensors: the header follows the public layout (length, JSON, 8-byte alignment, tiled buffer)") {
  std::string bytes = st::serialize(counterpart_tensors(), kCounterpartMeta);
  std::uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  REQUIRE(8 + n <= bytes.size());
  CHECK((8 + n) % 8 == 0);
  CHECK(bytes[8] == '{');
  nlohmann::json header = nlohmann::json::parse(bytes.substr(8, n));
  CHECK(header["__metadata__"]["step"] == "1200");
  CHECK(header["weights"]["dtype"] == "F32");
  CHECK(header["weights"]["shape"] == nlohmann::json::array({2, 3, 4}));
  CHECK(header["scalar"]["shape"] == nlohmann::json::array());
  CHECK(header["half"]["dtype"] == "F16");
  // Largest elements first, then names: every tensor starts at a multiple of its element size.
  CHECK(header["counts"]["data_offsets"] == nlohmann::json::array({0, 24}));
  CHECK(header["scalar"]["data_offsets"] == nlohmann::json::array({24, 32}));
  CHECK(header["weights"]["data_offsets"] == nlohmann::json::array({32, 128}));
  CHECK(bytes.size() - 8 - n == 128 + 0 + 4 + 10);  // ... empty (0 bytes), half, pixels
  float w1 = 0;
  std::memcpy(&w1, bytes.data() + 8 + n + 32 + 4, 4);
  CHECK(w1 == 0.125f);
}

TEST_CASE("safetensors: Python reads what C++ writes, and C++ reads what Python writes") {
  TempDir dir;
  const std::string counterpart = tandem::test::source_root() + "/tests/safetensors_counterpart.py";
  st::save_file(dir.file("cpp.safetensors"), counterpart_tensors(), kCounterpartMeta);
  auto r = tandem::test::run_command(python() + " " + counterpart + " check " + dir.file("cpp.safetensors"));
  INFO(r.output);
  CHECK(r.status == 0);

  r = tandem::test::run_command(python() + " " + counterpart + " write " + dir.file("py.safetensors"));
  INFO(r.output);
  REQUIRE(r.status == 0);
  check_counterpart_tensors(st::load_file(dir.file("py.safetensors")));
}

TEST_CASE("safetensors: truncated or corrupt files are one-line errors naming the file") {
  TempDir dir;
  const std::string good = st::serialize(counterpart_tensors(), kCounterpartMeta);
  std::uint64_t n = 0;
  std::memcpy(&n, good.data(), 8);
  struct Row {
    const char* what;
    std::string bytes;
    const char* reason;
  };
  std::string huge_length = good;
  const std::uint64_t huge = 1ull << 40;
  std::memcpy(huge_length.data(), &huge, 8);
  std::string bad_json = good;
  bad_json[8 + 1] = '!';
  std::string gap = good;  // a tensor's offsets moved by one byte
  const std::string from = "\"data_offsets\":[0,24]", to = "\"data_offsets\":[1,25]";
  gap.replace(gap.find(from), from.size(), to);
  const Row rows[] = {
      {"empty", "", "0 bytes, shorter than the 8-byte header length"},
      {"truncated header", good.substr(0, 8 + n / 2), "does not fit"},
      {"truncated data", good.substr(0, good.size() - 5), "of a 137-byte buffer"},
      {"trailing bytes", good + "xx", "bytes of tensor data, the buffer holds"},
      {"header length", huge_length, "header length 1099511627776"},
      {"bad json", bad_json, "header JSON"},
      {"gap", gap, "overlaps or leaves a gap"},
  };
  for (const Row& r : rows) {
    CAPTURE(r.what);
    const std::string path = dir.file(std::string(r.what) + ".safetensors");
    write_bytes(path, r.bytes);
    std::string e = error_of([&] { st::load_file(path); });
    CHECK(e.find(path + " is not a valid safetensors file") != std::string::npos);
    CHECK(e.find(r.reason) != std::string::npos);
    CHECK(e.find('\n') == std::string::npos);
  }
  CHECK(error_of([&] { st::load_file(dir.file("missing.safetensors")); }).find("cannot read") != std::string::npos);
}

TEST_CASE("safetensors: writes are atomic renames that leave no temporary behind") {
  TempDir dir;
  const std::string path = dir.file("ckpt.safetensors");
  st::save_file(path, {{"a", torch::ones({3})}}, {});
  st::save_file(path, {{"a", torch::zeros({5})}}, {{"step", "2"}});  // replaces, never appends
  st::Contents c = st::load_file(path);
  CHECK(c.at("a").numel() == 5);
  CHECK(c.meta("step") == "2");
  int files = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir.path())) ++files;
  CHECK(files == 1);

  std::string e = error_of([&] {
    st::save_file(dir.file("no/such/dir/x.safetensors"), {{"a", torch::ones({1})}}, {});
  });
  CHECK(e.find("cannot write '" + dir.file("no/such/dir/x.safetensors") + "' (open failed") != std::string::npos);
  CHECK(error_of([] {
          st::serialize({{"a", torch::ones({1})}, {"a", torch::ones({1})}}, {});
        }).find("two tensors are named 'a'") != std::string::npos);
  CHECK(error_of([] {
          st::serialize({{"c", torch::ones({1}, torch::kComplexFloat)}}, {});
        }).find("tensor 'c' has dtype") != std::string::npos);
  // The bytes on disk are exactly what serialize() produces.
  CHECK(read_bytes(path) == st::serialize({{"a", torch::zeros({5})}}, {{"step", "2"}}));
}
