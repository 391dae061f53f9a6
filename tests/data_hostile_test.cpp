// Dataset files crafted to attack the readers: headers whose sizes overflow, claims the file cannot
// hold, zero and surplus dimensions. Each must be refused with one line naming the file, before any
// shared memory is reserved (a tiny TANDEM_SHM_LIMIT would fail differently if the claim got that
// far) and without a large allocation (the CLI runs under an address-space cap).
#include <doctest/doctest.h>

#include <random>

#include "common/error.hpp"
#include "tests/data_files.hpp"
#include "tests/harness.hpp"
#include "tests/sanitizer.hpp"
#include "datasets/preload.hpp"

using namespace tandem;
namespace fs = std::filesystem;

namespace {
using tandem::test::error_of;

constexpr std::uint64_t k2to56 = 1ull << 56, k2to61 = 1ull << 61;

// ASan reserves terabytes of shadow address space, so the cap only applies to a plain build.
constexpr const char* kCapped = test::kAddressSanitizer ? "" : "prlimit --as=1073741824";

// `tandem data preload` of `dir` must fail with one line holding `expected`, exit 1, within 1 GiB of
// address space and before asking for more than 1 MiB of /dev/shm, leaving no segment.
void check_refused(const test::TempDir& dir, const std::string& expected) {
  const std::string name = test::unique_name("hostile");
  test::check_one_line_error("data preload " + name + " --from " + dir.path().string(), expected, "tandem.data." + name,
                             std::string("TANDEM_SHM_LIMIT=1M ") + kCapped);
}

std::string random_bytes(std::size_t n) {
  std::mt19937 gen(7);
  std::string out(n, '\0');
  for (char& c : out) c = static_cast<char>(gen());
  return out;
}

void write_labels(const fs::path& dir, std::uint32_t n) {
  test::write_bytes(dir / "train-labels-idx1-ubyte", test::idx_bytes({n}, std::string(n, '\1')));
}

}  // namespace

TEST_CASE("data cli: an npy header with shape (256, 2^56) in 128 bytes is refused, not preloaded") {
  test::TempDir dir;
  const std::string x = test::npy_bytes("|u1", {256, k2to56}, "");
  REQUIRE(x.size() == 128);
  test::write_bytes(dir / "x_train.npy", x);
  test::write_bytes(dir / "y_train.npy", test::npy_bytes("|u1", {256}, std::string(256, '\1')));
  check_refused(dir, "x_train.npy has a .npy header whose shape (256, 72057594037927936) does not fit in 64 bits");
}

TEST_CASE("data cli: a 256-byte npy pair whose sizes wrap to 0 plans no jobs and allocates nothing") {
  test::TempDir dir;
  test::write_bytes(dir / "x_train.npy", test::npy_bytes("|u1", {k2to61, 8}, ""));
  test::write_bytes(dir / "y_train.npy", test::npy_bytes("<i8", {k2to61}, ""));
  REQUIRE(fs::file_size(dir / "x_train.npy") + fs::file_size(dir / "y_train.npy") == 256);
  check_refused(dir, "x_train.npy has a .npy header whose shape (2305843009213693952, 8) does not fit in 64 bits");
  fs::rename(dir / "y_train.npy", dir / "x_train.npy");
  test::write_bytes(dir / "y_train.npy", test::npy_bytes("<i8", {k2to61}, ""));
  CHECK(error_of([&] { data::plan_load(dir.path(), "npy"); }).find("does not fit in 64 bits") != std::string::npos);
}

TEST_CASE("data cli: an IDX header of 4 x 0x80000000 x 0x80000000 images is refused, not preloaded") {
  test::TempDir dir;
  test::write_bytes(dir / "train-images-idx3-ubyte", test::idx_bytes({4, 0x80000000u, 0x80000000u}, ""));
  write_labels(dir.path(), 4);
  check_refused(
      dir, "train-images-idx3-ubyte has an IDX header (4x2147483648x2147483648) whose size does not fit in 64 bits");
}

TEST_CASE("data cli: a gzip IDX claiming more than deflate can hold is refused before shm is reserved") {
  test::TempDir dir;
  const std::uint32_t count = 1530612;  // 1.2 GB claimed by a few hundred bytes of gzip
  const fs::path images = dir / "train-images-idx3-ubyte.gz";
  test::write_gzip(images, test::idx_bytes({count, 28, 28}, std::string(4096, '\0')));
  test::write_gzip(dir / "train-labels-idx1-ubyte.gz", test::idx_bytes({count}, ""));
  SUBCASE("with the stream's own trailer, deflate's ratio refuses the header's claim") {
    check_refused(dir, "train-images-idx3-ubyte.gz is");
    CHECK(error_of([&] { data::plan_load(dir.path(), "idx"); }).find("which cannot inflate to the 1199999824 bytes") !=
          std::string::npos);
  }
  SUBCASE("with a trailer forged to agree with the header, deflate's ratio still refuses it") {
    // 4 MiB of zeros deflate to 4 KB, more than zlib inflates ahead while the header is read, so
    // zlib never reaches the forged trailer before the claim is judged.
    test::write_gzip(images, test::idx_bytes({count, 28, 28}, std::string(4u << 20, '\0')));
    test::forge_gzip_trailer(images, static_cast<std::uint32_t>(16 + std::uint64_t{count} * 784));
    REQUIRE(fs::file_size(images) < 8192);
    check_refused(dir, "train-images-idx3-ubyte.gz is");
    CHECK(error_of([&] { data::plan_load(dir.path(), "idx"); }).find("which cannot inflate to the 1199999824 bytes") !=
          std::string::npos);
  }
}

TEST_CASE("data cli: a gzip IDX within deflate's ratio but without its data is refused before shm is reserved") {
  test::TempDir dir;
  const std::uint32_t count = 5000;  // 3.9 MB claimed, 4 KiB of incompressible data present
  const fs::path images = dir / "train-images-idx3-ubyte.gz";
  test::write_gzip(images, test::idx_bytes({count, 28, 28}, random_bytes(4096)));
  test::write_gzip(dir / "train-labels-idx1-ubyte.gz", test::idx_bytes({count}, std::string(count, '\1')));
  check_refused(dir, "train-images-idx3-ubyte.gz is truncated or corrupt: it ends before the data its header promises");

  SUBCASE("and with a forged trailer, zlib's length check refuses it") {
    test::forge_gzip_trailer(images, 16 + count * 784);
    check_refused(dir, "train-images-idx3-ubyte.gz is truncated or corrupt: incorrect length check");
  }

  SUBCASE("and data beyond the claim is refused too") {
    test::write_gzip(images, test::idx_bytes({2, 28, 28}, random_bytes(3 * 784)));
    test::write_gzip(dir / "train-labels-idx1-ubyte.gz", test::idx_bytes({2}, std::string(2, '\1')));
    check_refused(dir, "train-images-idx3-ubyte.gz holds more data than its header says");
  }
}

TEST_CASE("data: zero, negative, huge and surplus dimensions are refused by name") {
  test::TempDir dir;
  auto npy_error = [&](const std::string& x_file) {
    test::write_bytes(dir / "x_train.npy", x_file);
    test::write_bytes(dir / "y_train.npy", test::npy_bytes("<i8", {2}, std::string(16, '\0')));
    return error_of([&] { data::plan_load(dir.path(), "npy"); });
  };
  auto with_shape_text = [](std::string file, const std::string& from, const std::string& to) {
    file.replace(file.find(from), from.size(), to);
    return file;
  };
  const std::string two_by_three = test::npy_bytes("|u1", {2, 3}, std::string(6, '\0'));
  CHECK(npy_error(test::npy_bytes("|u1", {2, 0}, "")).find("has a 0 in its per-sample shape (2, 0)") !=
        std::string::npos);
  CHECK(npy_error(test::npy_bytes("|u1", {2, 1, 1, 1, 1, 1}, std::string(2, '\0'))).find("5 dimensions per sample") !=
        std::string::npos);
  CHECK(npy_error(with_shape_text(two_by_three, "(2, 3)", "(2,-3)")).find("unreadable .npy header (shape)") !=
        std::string::npos);
  CHECK(npy_error(with_shape_text(two_by_three, "(2, 3)", "(2,99999999999999999999)")).find("a dimension above 2^64") !=
        std::string::npos);

  test::TempDir idx;
  test::write_bytes(idx / "train-images-idx3-ubyte", test::idx_bytes({2, 0, 28}, ""));
  write_labels(idx.path(), 2);
  CHECK(error_of([&] { data::plan_load(idx.path(), "idx"); }).find("has a 0 in its IDX header's dimensions (2x0x28)") !=
        std::string::npos);
}
