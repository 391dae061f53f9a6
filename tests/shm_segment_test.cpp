#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "common/error.hpp"
#include "common/file_descriptor.hpp"
#include "shm/segment.hpp"
#include "shm/weight_slab.hpp"
#include "tests/harness.hpp"

using namespace tandem;
using shm::Kind;
using shm::Segment;

namespace {
using tandem::test::error_of;
Segment make(const std::string& name, std::size_t payload = 4096) {
  Segment s = Segment::create(name, Kind::dataset, 7, payload, "use another name");
  s.descriptor()[0] = std::byte{42};
  s.mark_ready();
  return s;
}
}  // namespace

TEST_CASE("segment: a created segment is mode 0600, 2 MiB-aligned, and attachable once ready") {
  std::string name = test::unique_name("tandem.test");
  Segment created = make(name);
  struct stat st {};
  REQUIRE(::stat(("/dev/shm/" + name).c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  CHECK(created.header().payload_offset == shm::kPayloadAlignment);
  CHECK(reinterpret_cast<std::uintptr_t>(created.payload()) % 4096 == 0);

  Segment attached = Segment::attach(name, Kind::dataset, 7, Segment::Access::read_only, "fix");
  CHECK(attached.descriptor()[0] == std::byte{42});
  CHECK(attached.payload_size() >= 4096);
}

TEST_CASE("segment: an unpersisted segment is removed with its handle, a persisted one stays") {
  std::string a = test::unique_name("tandem.test");
  { Segment s = make(a); }
  CHECK_FALSE(Segment::exists(a));

  std::string b = test::unique_name("tandem.test");
  {
    Segment s = make(b);
    s.persist();
  }
  CHECK(Segment::exists(b));
  CHECK(Segment::unlink(b));
  CHECK_FALSE(Segment::exists(b));
}

TEST_CASE("segment: attach refuses bad segments with one line naming the segment and the fix") {
  std::string name = test::unique_name("tandem.test");
  Segment s = make(name);

  CHECK(error_of([&] {
          Segment::attach(name + "x", Kind::dataset, 7, Segment::Access::read_only, "preload it");
        }).find("does not exist: preload it") != std::string::npos);
  CHECK(error_of([&] {
          Segment::attach(name, Kind::weights, 7, Segment::Access::read_only, "fix");
        }).find("holds a dataset segment, not a weights one") != std::string::npos);
  CHECK(error_of([&] {
          Segment::attach(name, Kind::dataset, 8, Segment::Access::read_only, "fix");
        }).find("was written by layout 7, this build reads 8") != std::string::npos);

  s.descriptor()[100] = std::byte{1};  // corrupt the header after it was checksummed
  std::string corrupt = error_of(
      [&] { Segment::attach(name, Kind::dataset, 7, Segment::Access::read_only, "remove it"); });
  CHECK(corrupt.find("corrupt header") != std::string::npos);
  CHECK(corrupt.find("remove it") != std::string::npos);

  s.header().magic = 0;
  CHECK(error_of([&] {
          Segment::attach(name, Kind::dataset, 7, Segment::Access::read_only, "fix");
        }).find("not a Tandem segment") != std::string::npos);
}

TEST_CASE("segment: a segment whose creator has not marked it ready is refused") {
  std::string name = test::unique_name("tandem.test");
  Segment s = Segment::create(name, Kind::dataset, 1, 4096, "fix");
  CHECK(error_of([&] {
          Segment::attach(name, Kind::dataset, 1, Segment::Access::read_only, "fix");
        }).find("still writing it") != std::string::npos);
}

TEST_CASE("segment: a truncated object is refused, not mapped past its end") {
  std::string name = test::unique_name("tandem.test");
  const FileDescriptor fd(::shm_open(("/" + name).c_str(), O_CREAT | O_RDWR, 0600));
  REQUIRE(fd.get() >= 0);
  REQUIRE(::ftruncate(fd.get(), 100) == 0);
  CHECK(error_of([&] {
          Segment::attach(name, Kind::dataset, 1, Segment::Access::read_only, "fix");
        }).find("truncated") != std::string::npos);
  Segment::unlink(name);
}

TEST_CASE("segment: too little /dev/shm is an error before anything is created") {
  std::string name = test::unique_name("tandem.test");
  ::setenv("TANDEM_SHM_LIMIT", "1M", 1);
  std::string message = error_of([&] { Segment::create(name, Kind::dataset, 1, 8u << 20, "fix"); });
  ::unsetenv("TANDEM_SHM_LIMIT");
  CHECK(message.find("not enough shared memory") != std::string::npos);
  CHECK(message.find("/dev/shm has 1.0 MiB free") != std::string::npos);
  CHECK_FALSE(Segment::exists(name));
}

TEST_CASE("segment: creating an existing name is refused with the caller's fix") {
  std::string name = test::unique_name("tandem.test");
  Segment s = make(name);
  CHECK(error_of([&] { make(name); }).find("already exists: use another name") != std::string::npos);
  CHECK(Segment::exists(name));  // the refused create did not remove the existing one
}

TEST_CASE("segment: a job's segments are named by their kind, as docs/FORMAT.md spells them, and names are checked") {
  CHECK(shm::dataset_segment_name("fmnist") == "tandem.data.fmnist");
  CHECK(shm::job_segment_name("run1", Kind::weights) == "tandem.run1.weights");
  CHECK(shm::job_segment_name("run1", Kind::weights_cuda) == "tandem.run1.weights.cuda");
  CHECK(shm::device_slab_name(shm::job_segment_name("run1", Kind::weights)) ==
        shm::job_segment_name("run1", Kind::weights_cuda));  // a publisher derives the device slab's name
  CHECK(shm::job_segment_name("run1", Kind::experience) == "tandem.run1.exp");
  CHECK(shm::job_segment_name("run1", Kind::control) == "tandem.run1.ctl");
  CHECK(shm::reduce_segment_name("run1", 42, false) == "tandem.run1.reduce-42");
  CHECK(shm::reduce_segment_name("run1", 42, true) == "tandem.run1.reduce-42-slots");
  CHECK_THROWS_AS(shm::job_segment_name("run1", Kind::reduce), std::logic_error);
  CHECK_THROWS_AS(shm::job_segment_name("run1", Kind::dataset), std::logic_error);
  CHECK(error_of([] { shm::dataset_segment_name("../etc"); }).find("not a valid name") != std::string::npos);
  CHECK(error_of([] { shm::job_segment_name("data", Kind::control); }).find("reserved") != std::string::npos);
  CHECK(error_of([] { shm::reduce_segment_name("a/b", 1, false); }).find("not a valid name") != std::string::npos);
  // A NUL byte would cut the message where what() ends; a newline would break its one line.
  CHECK(error_of([] { shm::job_segment_name(std::string("ab\0cd", 5), Kind::weights); }) ==
        "job name 'ab\\x00cd' is not a valid name: use 1-64 letters, digits, '_' or '-'");
  CHECK(error_of([] { shm::dataset_segment_name("a\nb"); }).find("'a\\x0ab'") != std::string::npos);
  // A whole object name with a NUL would name another object to the system calls: refused.
  const std::string cut("tandem.a\0b", 10);
  CHECK(error_of([&] { make(cut); }).find("name 'tandem.a\\x00b' is not a name") != std::string::npos);
  CHECK_FALSE(Segment::exists("tandem.a"));
}

TEST_CASE("segment: a handle whose name was removed knows it, and never removes the object that replaced it") {
  std::string name = test::unique_name("tandem.test");
  Segment old = make(name);
  CHECK(old.linked());
  REQUIRE(Segment::unlink(name));
  CHECK_FALSE(old.linked());
  Segment replacement = make(name);
  old = Segment();  // destroying the old handle removes nothing: the name is not its object's any more
  CHECK(Segment::exists(name));
  CHECK(replacement.linked());
}

TANDEM_CHILD("segment-creator-killed") {
  Segment s = Segment::create(test::child_args().at(0), Kind::dataset, 1, 4096, "fix");
  s.persist();
  ::pause();  // killed here, before mark_ready
  return 0;
}

TEST_CASE("segment: list reports a segment abandoned by its dead creator" * doctest::timeout(60)) {
  std::string name = test::unique_name("tandem.test");
  test::Child child = test::spawn_child("segment-creator-killed", {name});
  auto problem_of = [&]() -> std::string {
    for (const auto& info : shm::list_segments())
      if (info.name == name) return info.problem;
    return "missing";
  };
  // Its header is written and names a live creator: what a killed creator leaves behind is next.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (problem_of() != "being written" && std::chrono::steady_clock::now() < deadline) ::usleep(1000);
  REQUIRE(problem_of() == "being written");
  child.kill(SIGKILL);
  child.wait();
  bool seen = false;
  for (const auto& info : shm::list_segments()) {
    if (info.name != name) continue;
    seen = true;
    CHECK_FALSE(info.valid);
    CHECK(info.problem == "abandoned while being written");
  }
  CHECK(seen);
  Segment::unlink(name);
}

TEST_CASE("segment: a creator whose pid now belongs to a process started at another time is gone") {
  std::string name = test::unique_name("tandem.test");
  Segment s = Segment::create(name, Kind::dataset, 1, 4096, "fix");
  s.mark_ready();
  auto creator_alive = [&] {
    for (const auto& info : shm::list_segments())
      if (info.name == name) return info.creator_alive;
    FAIL("segment not listed");
    return false;
  };
  CHECK(creator_alive());          // this process, its start time as recorded
  s.header().creator_start ^= 1u;  // the pid's process now started at another tick: a reused pid
  CHECK_FALSE(creator_alive());
}
