// The acceptance run on the real Fashion-MNIST files (Debian package dataset-fashion-mnist, which
// tools/dev/setup installs): preload, info, the first image's bytes against the IDX file, mode 0600, rm.
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <zlib.h>

#include <filesystem>

#include "shm/dataset_cache.hpp"
#include "tests/data_files.hpp"
#include "tests/harness.hpp"

using namespace tandem;

namespace {

const char* kFashionMnist = "/usr/share/datasets/fashion-mnist";

// The first `bytes` bytes of a gzip file, decompressed with zlib.
std::string gunzip_head(const std::string& path, std::size_t bytes) {
  gzFile gz = ::gzopen(path.c_str(), "rb");
  REQUIRE(gz != nullptr);
  std::string out(bytes, '\0');
  int n = ::gzread(gz, out.data(), static_cast<unsigned>(bytes));
  ::gzclose(gz);
  REQUIRE(n == static_cast<int>(bytes));
  return out;
}

}  // namespace

TEST_CASE("data fmnist: preload, info, bytes, mode and rm on the real Fashion-MNIST" * doctest::timeout(120)) {
  REQUIRE_MESSAGE(std::filesystem::exists(std::string(kFashionMnist) + "/train-images-idx3-ubyte.gz"),
                  "install the Debian package dataset-fashion-mnist (./tools/dev/setup does)");
  const std::string name = test::unique_name("fmnist");
  const std::string segment = shm::dataset_segment_name(name);
  const std::string tandem = test::tandem_binary();

  test::CommandResult pre = test::run_command(tandem + " data preload " + name + " --from " + kFashionMnist);
  INFO(pre.output);
  REQUIRE(pre.status == 0);

  test::CommandResult info = test::run_command(tandem + " data info " + name);
  const std::string text = test::squeeze(info.output);
  INFO(info.output);
  CHECK(info.status == 0);
  CHECK(text.find("x uint8 1x28x28") != std::string::npos);
  CHECK(text.find("y int64 scalar") != std::string::npos);
  CHECK(text.find("labels 0-9") != std::string::npos);
  CHECK(text.find("train 60000 [0, 60000)") != std::string::npos);
  CHECK(text.find("test 10000 [60000, 70000)") != std::string::npos);
  CHECK(text.find("mode 0600") != std::string::npos);

  {
    shm::DatasetCache cache = shm::DatasetCache::attach(name);
    const std::string images = gunzip_head(std::string(kFashionMnist) + "/train-images-idx3-ubyte.gz", 16 + 784);
    const std::string labels = gunzip_head(std::string(kFashionMnist) + "/train-labels-idx1-ubyte.gz", 8 + 1);
    auto x = cache.field("x");
    CHECK(std::string(reinterpret_cast<const char*>(x.data), 784) == images.substr(16));
    CHECK(reinterpret_cast<const std::int64_t*>(cache.field("y").data)[0] == static_cast<unsigned char>(labels[8]));
    const std::string t10k = gunzip_head(std::string(kFashionMnist) + "/t10k-images-idx3-ubyte.gz", 16 + 784);
    CHECK(std::string(reinterpret_cast<const char*>(x.data + 60000 * 784), 784) == t10k.substr(16));

    struct stat st {};
    REQUIRE(::stat(("/dev/shm/" + segment).c_str(), &st) == 0);
    CHECK((st.st_mode & 07777) == 0600);
    CHECK(test::run_command(tandem + " data verify " + name).status == 0);
  }

  CHECK(test::run_command(tandem + " data rm " + name).status == 0);
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm"))
    CHECK(entry.path().filename().string().find(name) == std::string::npos);
}
