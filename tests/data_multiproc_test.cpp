// Dataset cache across processes: an interrupted preload leaves nothing in /dev/shm, and two
// processes reading one cache cost one copy of it in memory (PSS), not two.
#include <doctest/doctest.h>
#include <signal.h>
#include <unistd.h>

#include <fmt/format.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include "shm/dataset_cache.hpp"
#include "tests/data_files.hpp"
#include "tests/harness.hpp"
#include "datasets/preload.hpp"

using namespace tandem;
namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

bool wait_until(const std::function<bool()>& done, std::chrono::milliseconds timeout) {
  for (auto end = std::chrono::steady_clock::now() + timeout; std::chrono::steady_clock::now() < end;) {
    if (done()) return true;
    std::this_thread::sleep_for(1ms);
  }
  return done();
}

// x_train.npy of `mib` MiB (uint8 rows of 4096) and its labels.
void write_big_npy(const fs::path& dir, std::uint64_t mib) {
  const std::uint64_t rows = mib * 256;
  test::write_bytes(dir / "x_train.npy", test::npy_bytes("|u1", {rows, 4096}, std::string(rows * 4096, '\x5a')));
  test::write_bytes(dir / "y_train.npy", test::npy_bytes("<i8", {rows}, std::string(rows * 8, '\0')));
}

// Pss (bytes) of this process's mapping that starts at `base`, from /proc/self/smaps.
std::uint64_t mapping_pss(const void* base) {
  std::ifstream smaps("/proc/self/smaps");
  const std::string start = fmt::format("{:x}-", reinterpret_cast<std::uintptr_t>(base));
  bool in_mapping = false;
  for (std::string line; std::getline(smaps, line);) {
    if (line.find('-') != std::string::npos && line.find(' ') > line.find('-') && std::isxdigit(line[0]))
      in_mapping = line.starts_with(start);
    if (in_mapping && line.starts_with("Pss:")) return std::stoull(line.substr(4)) * 1024;
  }
  return 0;
}

}  // namespace

// Preloads with one loader thread whose progress callback, after the first piece, says so (by
// creating `marker`) and then stalls: the parent interrupts a load that is surely in progress.
TANDEM_CHILD("preload-stalls") {
  const auto& args = test::child_args();
  const std::string& marker = args.at(2);
  data::PreloadOptions o{args.at(0), args.at(1), "npy", false, 1, [marker](std::uint64_t, std::uint64_t) {
                           test::write_bytes(marker, "loading");
                           for (;;) ::pause();
                         }};
  data::preload(o);
  return 0;
}

TEST_CASE("data preload: SIGINT in the middle of loading leaves no segment" * doctest::timeout(60)) {
  test::TempDir dir;
  write_big_npy(dir.path(), 64);
  const std::string name = test::unique_name("interrupted");
  const std::string segment = shm::dataset_segment_name(name);
  test::Child child = test::spawn_child("preload-stalls", {name, dir.path().string(), (dir / "marker").string()});
  REQUIRE(wait_until([&] { return fs::exists(dir / "marker"); }, 30s));
  CHECK(shm::Segment::exists(segment));  // the segment is there, half written
  child.kill(SIGINT);
  CHECK(child.wait() == 128 + SIGINT);
  CHECK_FALSE(shm::Segment::exists(segment));
  shm::Segment::unlink(segment);
}

// `tandem data preload` itself, stopped by SIGTERM as soon as its segment appears (while it is
// being created or filled): nothing may be left either way.
TANDEM_CHILD("exec-tandem") {
  std::vector<std::string> args = {test::tandem_binary()};
  for (const auto& a : test::child_args()) args.push_back(a);
  std::vector<char*> argv;
  argv.reserve(args.size() + 1);
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  ::execv(argv[0], argv.data());
  return 127;
}

TEST_CASE("tandem data preload: SIGTERM while the segment is created or filled leaves no segment" *
          doctest::timeout(120)) {
  test::TempDir dir;
  write_big_npy(dir.path(), 128);
  const std::string name = test::unique_name("terminated");
  const std::string segment = shm::dataset_segment_name(name);
  test::Child child = test::spawn_child("exec-tandem",
                                        {"data", "preload", name, "--from", dir.path().string(), "--threads", "1"});
  REQUIRE(wait_until([&] { return shm::Segment::exists(segment); }, 60s));
  child.kill(SIGTERM);
  const int status = child.wait();
  CHECK(status == 128 + SIGTERM);  // 0 would mean the load finished first: the test proved nothing
  CHECK_FALSE(shm::Segment::exists(segment));
  shm::Segment::unlink(segment);
}

// Attaches the cache, reads every page of it, waits for the other reader to do the same, then
// reports the Pss of its mapping in `<dir>/pss.<id>` and waits for the parent to finish.
TANDEM_CHILD("pss-reader") {
  const auto& args = test::child_args();
  const std::string &name = args.at(0), &id = args.at(2);
  const fs::path dir = args.at(1);
  shm::DatasetCache cache = shm::DatasetCache::attach(name);
  const auto* base = reinterpret_cast<const volatile unsigned char*>(cache.segment().base());
  unsigned sum = 0;
  for (std::size_t at = 0; at < cache.segment().size(); at += 4096) sum += base[at];
  test::write_bytes(dir / ("touched." + id), std::to_string(sum));
  if (!wait_until([&] { return fs::exists(dir / "touched.0") && fs::exists(dir / "touched.1"); }, 30s)) return 2;
  test::write_bytes(dir / ("pss.tmp." + id), std::to_string(mapping_pss(cache.segment().base())));
  fs::rename(dir / ("pss.tmp." + id), dir / ("pss." + id));
  return wait_until([&] { return fs::exists(dir / "done"); }, 30s) ? 0 : 3;
}

TEST_CASE("dataset cache: two processes reading one cache add one copy of it to memory (PSS)" * doctest::timeout(60)) {
  const std::string name = test::unique_name("pss");
  std::uint64_t segment_bytes = 0;
  {
    shm::DatasetSpec spec{
        name, "/synthetic", "synthetic", 16384, {{"x", shm::DType::u8, {4096}}}, {{"train", 0, 16384}}};
    auto writer = shm::DatasetWriter::create(spec, false);
    std::memset(writer.field_data(0), 7, writer.descriptor().fields[0].bytes);
    writer.commit(0, 2);
    segment_bytes = shm::DatasetCache::attach(name).segment().size();
  }  // the writer's mapping is gone: only the two readers map the cache now
  struct Cleanup {
    std::string seg;
    ~Cleanup() { shm::Segment::unlink(seg); }
  } cleanup{shm::dataset_segment_name(name)};

  test::TempDir dir;
  test::Child a = test::spawn_child("pss-reader", {name, dir.path().string(), "0"});
  test::Child b = test::spawn_child("pss-reader", {name, dir.path().string(), "1"});
  REQUIRE(wait_until([&] { return fs::exists(dir / "pss.0") && fs::exists(dir / "pss.1"); }, 30s));
  auto read_pss = [&](const char* f) {
    std::ifstream in(dir / f);
    std::uint64_t v = 0;
    in >> v;
    return v;
  };
  const std::uint64_t pss0 = read_pss("pss.0"), pss1 = read_pss("pss.1");
  test::write_bytes(dir / "done", "");
  CHECK(a.wait() == 0);
  CHECK(b.wait() == 0);

  const double copies = double(pss0 + pss1) / double(segment_bytes);
  MESSAGE(fmt::format("segment {} MiB; Pss {} + {} MiB = {:.2f} copies", segment_bytes >> 20, pss0 >> 20, pss1 >> 20,
                      copies));
  CHECK(copies > 0.9);  // every page was touched, so it is counted once ...
  CHECK(copies < 1.1);  // ... and shared, not twice
  CHECK(double(pss0) / double(segment_bytes) == doctest::Approx(0.5).epsilon(0.1));
}
