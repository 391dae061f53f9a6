// Dataset readers and `tandem data`: what each format becomes in the cache, and the bad-input
// contract (one line naming the thing and the fix, exit 1, nothing left in /dev/shm).
#include <doctest/doctest.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstring>

#include "common/error.hpp"
#include "common/file_descriptor.hpp"
#include "shm/dataset_cache.hpp"
#include "tests/data_files.hpp"
#include "tests/harness.hpp"
#include "datasets/preload.hpp"

using namespace tandem;
namespace fs = std::filesystem;

namespace {
using tandem::test::error_of;

data::PreloadResult load(const std::string& name, const fs::path& from, std::string format = "") {
  return data::preload({name, from, std::move(format), false, 3, {}});
}

// Removes the cache when the test ends, however it ends.
struct CacheName {
  std::string name = test::unique_name("t");
  ~CacheName() { shm::Segment::unlink(shm::dataset_segment_name(name)); }
  std::string segment() const { return shm::dataset_segment_name(name); }
};

void check_labels(const shm::DatasetCache& cache, std::uint64_t n) {
  auto y = cache.field("y");
  CHECK(y.dtype == shm::DType::i64);
  CHECK(y.sample_shape.empty());
  const auto* labels = reinterpret_cast<const std::int64_t*>(y.data);
  for (std::uint64_t s = 0; s < n; ++s) REQUIRE(labels[s] == static_cast<std::int64_t>(s % 10));
}

void check_images(const shm::DatasetCache& cache, std::uint64_t n, std::uint64_t per_sample) {
  auto x = cache.field("x");
  CHECK(x.dtype == shm::DType::u8);
  CHECK(x.stride == per_sample);
  for (std::uint64_t s = 0; s < n; ++s)
    for (std::uint64_t i = 0; i < per_sample; ++i)
      REQUIRE(static_cast<char>(x.data[s * per_sample + i]) == test::pixel(s, i));
}

// Flips one byte of a segment file in place.
void flip_byte(const std::string& segment, std::uint64_t offset) {
  const FileDescriptor fd(::open(("/dev/shm/" + segment).c_str(), O_RDWR));
  REQUIRE(fd.get() >= 0);
  unsigned char b = 0;
  REQUIRE(::pread(fd.get(), &b, 1, static_cast<off_t>(offset)) == 1);
  b ^= 0xff;
  REQUIRE(::pwrite(fd.get(), &b, 1, static_cast<off_t>(offset)) == 1);
}

test::CommandResult run_tandem(const std::string& args) {
  return test::run_command(test::tandem_binary() + " " + args);
}

}  // namespace

TEST_CASE("data: IDX files, plain or gzip, become x uint8 [1,H,W] and int64 labels, train before test") {
  for (bool gz : {false, true}) {
    CAPTURE(gz);
    test::TempDir dir;
    test::write_idx_dataset(dir.path(), 50, 20, 5, 7, gz);
    CacheName c;
    CHECK(data::detect_format(dir.path()) == "idx");
    data::PreloadResult r = load(c.name, dir.path());
    CHECK(r.num_samples == 70);
    CHECK(r.payload_bytes == 70 * 35 + 70 * 8);

    shm::DatasetCache cache = shm::DatasetCache::attach(c.name);
    auto x = cache.field("x");
    CHECK(std::vector<std::uint64_t>(x.sample_shape.begin(), x.sample_shape.end()) ==
          std::vector<std::uint64_t>{1, 5, 7});
    check_images(cache, 70, 35);
    check_labels(cache, 70);
    CHECK(cache.split("train").begin == 0);
    CHECK(cache.split("train").end == 50);
    CHECK(cache.split("test").begin == 50);
    CHECK(cache.split("test").end == 70);
    CHECK(std::string(cache.descriptor().format) == "idx");
    CHECK(cache.descriptor().payload_checksum == r.checksum);
    CHECK(cache.compute_checksum(2) == r.checksum);
  }
}

TEST_CASE("data: CIFAR-10 batches become x uint8 [3,32,32] and int64 labels, batches in order") {
  test::TempDir dir;
  fs::create_directory(dir / "cifar-10-batches-bin");  // as the official tarball unpacks
  test::write_bytes(dir / "cifar-10-batches-bin/data_batch_1.bin", test::cifar_records(5, 0));
  test::write_bytes(dir / "cifar-10-batches-bin/data_batch_2.bin", test::cifar_records(3, 5));
  test::write_bytes(dir / "cifar-10-batches-bin/test_batch.bin", test::cifar_records(4, 8));
  CHECK(data::detect_format(dir.path()) == "cifar10");
  CacheName c;
  load(c.name, dir.path());
  shm::DatasetCache cache = shm::DatasetCache::attach(c.name);
  CHECK(cache.num_samples() == 12);
  auto x = cache.field("x");
  CHECK(std::vector<std::uint64_t>(x.sample_shape.begin(), x.sample_shape.end()) ==
        std::vector<std::uint64_t>{3, 32, 32});
  check_images(cache, 12, 3072);
  check_labels(cache, 12);
  CHECK(cache.split("train").end == 8);
  CHECK(cache.split("test").begin == 8);
}

TEST_CASE("data: npy pairs keep x's dtype and shape and store integer labels as int64") {
  test::TempDir dir;
  std::vector<float> xtrain(6 * 2 * 3), xtest(4 * 2 * 3);
  for (std::size_t i = 0; i < xtrain.size(); ++i) xtrain[i] = 0.5f * static_cast<float>(i);
  for (std::size_t i = 0; i < xtest.size(); ++i) xtest[i] = -1.0f * static_cast<float>(i);
  test::write_bytes(dir / "x_train.npy", test::npy_bytes("<f4", {6, 2, 3}, test::raw(xtrain)));
  test::write_bytes(dir / "y_train.npy",
                    test::npy_bytes("|u1", {6}, test::raw(std::vector<std::uint8_t>{0, 1, 2, 3, 4, 5})));
  test::write_bytes(dir / "x_test.npy", test::npy_bytes("<f4", {4, 2, 3}, test::raw(xtest)));
  test::write_bytes(dir / "y_test.npy", test::npy_bytes("<i2", {4}, test::raw(std::vector<std::int16_t>{6, 7, 8, 9})));
  CHECK(data::detect_format(dir.path()) == "npy");
  CacheName c;
  load(c.name, dir.path());
  shm::DatasetCache cache = shm::DatasetCache::attach(c.name);
  auto x = cache.field("x");
  CHECK(x.dtype == shm::DType::f32);
  CHECK(std::vector<std::uint64_t>(x.sample_shape.begin(), x.sample_shape.end()) == std::vector<std::uint64_t>{2, 3});
  CHECK(std::memcmp(x.data, xtrain.data(), xtrain.size() * 4) == 0);
  CHECK(std::memcmp(x.data + 6 * 24, xtest.data(), xtest.size() * 4) == 0);
  check_labels(cache, 10);
  CHECK(cache.split("test").begin == 6);
}

TEST_CASE("data: a float or multi-column y keeps its dtype and shape") {
  test::TempDir dir;
  test::write_bytes(dir / "x_train.npy", test::npy_bytes("|u1", {3, 2}, std::string(6, '\x07')));
  std::vector<double> y = {1.5, 2.5, 3.5, 4.5, 5.5, 6.5};
  test::write_bytes(dir / "y_train.npy", test::npy_bytes("<f8", {3, 2}, test::raw(y)));
  CacheName c;
  load(c.name, dir.path(), "npy");
  shm::DatasetCache cache = shm::DatasetCache::attach(c.name);
  auto f = cache.field("y");
  CHECK(f.dtype == shm::DType::f64);
  CHECK(f.stride == 16);
  CHECK(std::memcmp(f.data, y.data(), 48) == 0);  // NOLINT(bugprone-suspicious-memory-comparison): bitwise, on purpose
}

TEST_CASE("data: npy files a cache cannot hold are refused by name before anything is created") {
  test::TempDir dir;
  auto try_x = [&](const std::string& x_file_bytes) {
    test::write_bytes(dir / "x_train.npy", x_file_bytes);
    test::write_bytes(dir / "y_train.npy", test::npy_bytes("<i8", {2}, std::string(16, '\0')));
    return error_of([&] { data::plan_load(dir.path(), "npy"); });
  };
  CHECK(try_x(test::npy_bytes("<f4", {2, 3}, std::string(24, '\0'), true)).find("Fortran order") != std::string::npos);
  CHECK(try_x(test::npy_bytes(">f4", {2, 3}, std::string(24, '\0'))).find("big-endian") != std::string::npos);
  CHECK(try_x(test::npy_bytes("<c8", {2, 3}, std::string(48, '\0'))).find("dtype '<c8'") != std::string::npos);
  CHECK(try_x(test::npy_bytes("<u8", {2, 3}, std::string(48, '\0'))).find("dtype '<u8'") != std::string::npos);
  CHECK(try_x(test::npy_bytes("<f4", {2, 3}, std::string(20, '\0'))).find("truncated") != std::string::npos);
  CHECK(try_x("not a numpy file at all").find("not a .npy file") != std::string::npos);
  CHECK(try_x(test::npy_bytes("<f4", {3, 3}, std::string(36, '\0'))).find("same first dimension") != std::string::npos);
  fs::remove(dir / "y_train.npy");
  CHECK(error_of([&] { data::plan_load(dir.path(), "npy"); }).find("needs both x_train.npy and y_train.npy") !=
        std::string::npos);
}

TEST_CASE("data: a folder that holds no known format is a clear error that lists them") {
  test::TempDir dir;
  test::write_bytes(dir / "README", "nothing here");
  std::string e = error_of([&] { data::detect_format(dir.path()); });
  CHECK(e.find("cannot tell the format") != std::string::npos);
  CHECK(e.find("--format") != std::string::npos);
  CHECK(error_of([&] { data::detect_format(dir / "missing"); }).find("no such directory") != std::string::npos);
}

TEST_CASE("data cli: bad IDX input is one line, exit 1, and leaves no segment") {
  test::TempDir dir;
  CacheName c;
  const std::string args = "data preload " + c.name + " --from " + dir.path().string();

  SUBCASE("a truncated .gz") {
    test::write_idx_dataset(dir.path(), 200, 0, 28, 28, true);
    fs::resize_file(dir / "train-images-idx3-ubyte.gz", fs::file_size(dir / "train-images-idx3-ubyte.gz") / 2);
    test::check_one_line_error(args, "train-images-idx3-ubyte.gz is truncated or corrupt", c.segment());
  }
  SUBCASE("a .gz whose data is corrupt but whose trailer is intact fails before anything is created") {
    std::string images;
    for (int i = 0; i < 200 * 784; ++i) images += test::pixel(static_cast<std::uint64_t>(i) * 2654435761u >> 7, 0);
    test::write_gzip(dir / "train-images-idx3-ubyte.gz", test::idx_bytes({200, 28, 28}, images));
    test::write_gzip(dir / "train-labels-idx1-ubyte.gz", test::idx_bytes({200}, std::string(200, '\1')));
    {
      std::fstream f(dir / "train-images-idx3-ubyte.gz", std::ios::in | std::ios::out | std::ios::binary);
      for (int at : {200, 300, 400}) {
        f.seekp(at);
        f.put('\x55');
      }
    }
    // zlib's own words (e.g. "invalid distance too far back"), from the inflating check of the plan
    test::check_one_line_error(args, "train-images-idx3-ubyte.gz is truncated or corrupt: invalid", c.segment());
  }
  SUBCASE("a wrong magic number") {
    test::write_bytes(dir / "train-images-idx3-ubyte", test::idx_bytes({2, 2, 2}, std::string(8, 'a'), 0xdeadbeef));
    test::write_bytes(dir / "train-labels-idx1-ubyte", test::idx_bytes({2}, std::string(2, '\1')));
    test::check_one_line_error(args, "is not an IDX file with 3 dimensions (magic 0xdeadbeef, expected 0x00000803)",
                               c.segment());
  }
  SUBCASE("an IDX element type other than unsigned bytes") {
    test::write_bytes(dir / "train-images-idx3-ubyte", test::idx_bytes({2, 2, 2}, std::string(8, 'a'), 0x00000903));
    test::write_bytes(dir / "train-labels-idx1-ubyte", test::idx_bytes({2}, std::string(2, '\1')));
    test::check_one_line_error(args, "holds IDX type 0x09; only unsigned bytes (0x08) are read", c.segment());
  }
  SUBCASE("image and label counts that differ") {
    test::write_bytes(dir / "train-images-idx3-ubyte", test::idx_bytes({3, 2, 2}, std::string(12, 'a')));
    test::write_bytes(dir / "train-labels-idx1-ubyte", test::idx_bytes({2}, std::string(2, '\1')));
    test::check_one_line_error(args, "holds 3 images but", c.segment());
  }
  SUBCASE("a plain file shorter than its header says") {
    test::write_bytes(dir / "train-images-idx3-ubyte", test::idx_bytes({3, 2, 2}, std::string(11, 'a')));
    test::write_bytes(dir / "train-labels-idx1-ubyte", test::idx_bytes({3}, std::string(3, '\1')));
    test::check_one_line_error(args, "is 27 bytes but its IDX header (3x2x2) needs 28", c.segment());
  }
  SUBCASE("labels without images") {
    test::write_bytes(dir / "t10k-labels-idx1-ubyte", test::idx_bytes({2}, std::string(2, '\1')));
    test::write_idx_dataset(dir.path(), 2, 0, 2, 2, false);
    test::check_one_line_error(args, "has t10k-labels but no t10k-images-idx3-ubyte[.gz]", c.segment());
  }
}

TEST_CASE("data cli: bad CIFAR-10 input is one line, exit 1, and leaves no segment") {
  test::TempDir dir;
  CacheName c;
  const std::string args = "data preload " + c.name + " --from " + dir.path().string();
  SUBCASE("a batch of the wrong size") {
    test::write_bytes(dir / "data_batch_1.bin", test::cifar_records(3, 0) + "xyz");
    test::check_one_line_error(args, "data_batch_1.bin is 9222 bytes, not a whole number of 3073-byte", c.segment());
  }
  SUBCASE("a label above 9 is found while loading") {
    std::string records = test::cifar_records(3, 0);
    records[3073] = 12;
    test::write_bytes(dir / "data_batch_1.bin", records);
    test::check_one_line_error(args + " --format cifar10", "record 1 has label 12", c.segment());
  }
}

TEST_CASE("data cli: too little /dev/shm is refused before a segment is created") {
  test::TempDir dir;
  test::write_idx_dataset(dir.path(), 20, 5, 4, 4, false);
  CacheName c;
  test::check_one_line_error("data preload " + c.name + " --from " + dir.path().string(),
                             "not enough shared memory for '/" + c.segment() + "'", c.segment(), "TANDEM_SHM_LIMIT=1M");
}

TEST_CASE("data cli: a cache with a corrupt header is refused by info and preload, replaced with --force") {
  test::TempDir dir;
  test::write_idx_dataset(dir.path(), 20, 5, 4, 4, false);
  CacheName c;
  const std::string preload = "data preload " + c.name + " --from " + dir.path().string();
  REQUIRE(run_tandem(preload).status == 0);
  flip_byte(c.segment(), 64 + 2);  // a byte of the descriptor's name: covered by the header checksum

  test::CommandResult info = run_tandem("data info " + c.name);
  CHECK(info.status == 1);
  CHECK(info.output.find("has a corrupt header (checksum mismatch): run `tandem data preload " + c.name) !=
        std::string::npos);
  CHECK(info.output.find('\n') == info.output.size() - 1);
  CHECK(error_of([&] { shm::DatasetCache::attach(c.name); }).find("corrupt header") != std::string::npos);
  CHECK(run_tandem("data ls").output.find("corrupt header") != std::string::npos);

  test::CommandResult again = run_tandem(preload);
  CHECK(again.status == 1);
  CHECK(again.output.find("already exists: dataset '" + c.name + "' is already preloaded: pass --force") !=
        std::string::npos);
  CHECK(again.output.find('\n') == again.output.size() - 1);
  CHECK(fs::exists("/dev/shm/" + c.segment()));  // the user's segment is not removed without --force

  CHECK(run_tandem(preload + " --force").status == 0);
  CHECK(run_tandem("data info " + c.name).status == 0);
  CHECK(run_tandem("data rm " + c.name).status == 0);
  CHECK_FALSE(fs::exists("/dev/shm/" + c.segment()));
}

TEST_CASE("data cli: verify detects a flipped payload byte and exits non-zero") {
  test::TempDir dir;
  test::write_idx_dataset(dir.path(), 300, 0, 28, 28, true);
  CacheName c;
  REQUIRE(run_tandem("data preload " + c.name + " --from " + dir.path().string()).status == 0);
  test::CommandResult ok = run_tandem("data verify " + c.name);
  CHECK(ok.status == 0);
  CHECK(ok.output.find("is intact") != std::string::npos);

  const std::uint64_t x_offset = shm::DatasetCache::attach(c.name).descriptor().fields[0].offset;
  flip_byte(c.segment(), x_offset + 1234);
  test::CommandResult bad = run_tandem("data verify " + c.name);
  CHECK(bad.status == 1);
  CHECK(bad.output.find("dataset cache '" + c.name + "' is corrupt") != std::string::npos);
  CHECK(bad.output.find("--force") != std::string::npos);
  CHECK(bad.output.find('\n') == bad.output.size() - 1);

  flip_byte(c.segment(), x_offset + 1234);  // flipped back: intact again
  CHECK(run_tandem("data verify " + c.name).status == 0);
}

TEST_CASE("data cli: info names what a cache holds; rm and info of a missing cache say what to do") {
  test::TempDir dir;
  test::write_idx_dataset(dir.path(), 30, 10, 3, 2, false);
  CacheName c;
  test::CommandResult pre = run_tandem("data preload " + c.name + " --from " + dir.path().string() + " --threads 2");
  CHECK(pre.status == 0);
  CHECK(pre.output.find("40 samples (train 30, test 10)") != std::string::npos);
  CHECK(pre.output.find('\033') == std::string::npos);  // no progress bar when stderr is not a terminal

  std::string info = test::squeeze(run_tandem("data info " + c.name).output);
  CHECK(info.find("x uint8 1x3x2") != std::string::npos);
  CHECK(info.find("labels 0-9") != std::string::npos);
  CHECK(info.find("mode 0600") != std::string::npos);
  CHECK(info.find("train 30 [0, 30)") != std::string::npos);
  CHECK(info.find("test 10 [30, 40)") != std::string::npos);
  CHECK(info.find(dir.path().string() + " (idx)") != std::string::npos);
  CHECK(run_tandem("data ls").output.find(c.name) != std::string::npos);

  CHECK(run_tandem("data rm " + c.name).status == 0);
  test::check_one_line_error("data rm " + c.name, "there is no dataset cache '" + c.name + "'", c.segment());
  test::check_one_line_error("data info " + c.name, "does not exist: run `tandem data preload " + c.name, c.segment());
  test::check_one_line_error("data preload ../x --from " + dir.path().string(),
                             "dataset name '../x' is not a valid name", c.segment());
}
