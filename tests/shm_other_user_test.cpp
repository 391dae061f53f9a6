// Segments of another user: the commands say "owned by uid N" and never claim to have removed, or not
// found, what they could not open; `shm gc` removes only this user's valid Tandem segments whose
// creator is dead and reports other tandem.* objects. Needs root (to act as `nobody` with setpriv and
// to hand a segment to nobody with fchown); elsewhere each case skips, saying so.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cstring>

#include "common/file_descriptor.hpp"
#include "shm/control_block.hpp"
#include "shm/dataset_cache.hpp"
#include "tests/case_check.hpp"
#include "tests/harness.hpp"

using namespace tandem;
using shm::Segment;

namespace {

constexpr unsigned kNobody = 65534;

std::string as_nobody(const std::string& command) {
  return "setpriv --reuid=" + std::to_string(kNobody) + " --regid=" + std::to_string(kNobody) + " --clear-groups " +
         command;
}

bool have_root() {
  if (::getuid() == 0) return true;
  test::skip_case("not root: the other-user cases need setpriv and fchown");
  return false;
}

// A valid 4-sample cache, removed with this handle (root can always remove it).
struct Cache {
  std::string name = test::unique_name("owned");
  std::string segment = shm::dataset_segment_name(name);
  Cache() {
    shm::DatasetSpec spec{name, "test", "synthetic", 4, {{"y", shm::DType::u8, {}}}, {{"train", 0, 4}}};
    auto w = shm::DatasetWriter::create(spec, false);
    std::memset(w.field_data(0), 1, 4);
    w.commit(0, 1);
  }
  ~Cache() { Segment::unlink(segment); }
  void give_to_nobody() const { REQUIRE(::chown(("/dev/shm/" + segment).c_str(), kNobody, kNobody) == 0); }
};

bool one_line(const std::string& out) { return !out.empty() && out.find('\n') == out.size() - 1; }

}  // namespace

TEST_CASE("another user's segments: shm gc, shm rm, data rm, data info and status say whose they are" *
          doctest::timeout(60)) {
  if (!have_root()) return;
  const std::string tandem = test::tandem_binary();
  Cache cache;
  const std::string job = test::unique_name("owned");
  auto block = shm::ControlBlock::create({.job = job, .learners = 1, .actors = 0, .run_dir = "/tmp/run"});
  const std::string owned = "owned by uid 0";

  auto gc = test::run_command(as_nobody(tandem + " shm gc"));
  INFO(gc.output);
  CHECK(gc.status == 0);
  CHECK(gc.output.find("skipped /" + cache.segment + ": " + owned) != std::string::npos);
  CHECK(gc.output.find("removed /" + cache.segment) == std::string::npos);

  for (const std::string& command :
       {fmt::format("{} shm rm {}", tandem, cache.segment), fmt::format("{} data rm {}", tandem, cache.name),
        fmt::format("{} data info {}", tandem, cache.name), fmt::format("{} status {}", tandem, job)}) {
    auto r = test::run_command(as_nobody(command));
    INFO(command, "\n", r.output);
    CHECK(r.status >= 1);
    CHECK(r.status <= 125);
    CHECK(one_line(r.output));
    CHECK(r.output.find(owned) != std::string::npos);
    CHECK(r.output.find("does not exist") == std::string::npos);
  }
  auto status = test::run_command(as_nobody(tandem + " status"));
  INFO(status.output);
  CHECK(status.output.find(shm::job_segment_name(job, shm::Kind::control) + "' is " + owned) != std::string::npos);
  CHECK(Segment::exists(cache.segment));
  CHECK(Segment::exists(shm::job_segment_name(job, shm::Kind::control)));
}

TEST_CASE("another user's segments as root: refused to attach, skipped by gc, removed only by name" *
          doctest::timeout(60)) {
  if (!have_root()) return;
  const std::string tandem = test::tandem_binary();
  Cache cache;
  cache.give_to_nobody();
  const std::string owned = "owned by uid " + std::to_string(kNobody);

  auto info = test::run_command(tandem + " data info " + cache.name);
  INFO(info.output);
  CHECK(info.status == 1);
  CHECK(one_line(info.output));
  CHECK(info.output.find(owned) != std::string::npos);

  auto gc = test::run_command(tandem + " shm gc --dry-run");
  INFO(gc.output);
  CHECK(gc.output.find("skipped /" + cache.segment + ": " + owned) != std::string::npos);

  auto ls = test::run_command(tandem + " shm ls");
  CHECK(ls.output.find("(" + owned + ")") != std::string::npos);

  auto rm = test::run_command(tandem + " shm rm " + cache.segment);
  INFO(rm.output);
  CHECK(rm.status == 0);
  CHECK(rm.output == "removed /" + cache.segment + " (" + owned + ")\n");
  CHECK_FALSE(Segment::exists(cache.segment));
}

TEST_CASE("shm gc removes a valid segment whose creator died and only reports a tandem.* file that is not one" *
          doctest::timeout(60)) {
  if (!have_root()) return;
  const std::string tandem = test::tandem_binary();
  // A dead pid: a child that has exited and been reaped.
  const pid_t dead = ::fork();
  if (dead == 0) ::_exit(0);
  REQUIRE(::waitpid(dead, nullptr, 0) == dead);

  // Both owned by nobody, so the gc runs as nobody and cannot touch anyone else's segments.
  const std::string orphan = shm::job_segment_name(test::unique_name("owned"), shm::Kind::control);
  {
    Segment s = Segment::create(orphan, shm::Kind::control, shm::kControlLayoutVersion, 4096, "");
    s.header().creator_pid = static_cast<std::uint32_t>(dead);
    s.mark_ready();
    s.persist();
    REQUIRE(::fchown(s.fd(), kNobody, kNobody) == 0);
  }
  const std::string junk = test::unique_name("tandem.junk");
  {
    const FileDescriptor fd(::open(("/dev/shm/" + junk).c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600));
    REQUIRE(fd.get() >= 0);
    const std::string text(8192, 'z');  // 'zzzz' where a creator pid would be
    REQUIRE(::write(fd.get(), text.data(), text.size()) == static_cast<ssize_t>(text.size()));
    REQUIRE(::fchown(fd.get(), kNobody, kNobody) == 0);
  }

  auto gc = test::run_command(as_nobody(tandem + " shm gc"));
  INFO(gc.output);
  CHECK(gc.status == 0);
  CHECK(gc.output.find(fmt::format("removed /{} (ready, creator pid {} is gone)", orphan, dead)) != std::string::npos);
  CHECK(gc.output.find("left /" + junk + ": not a Tandem segment (pass --all-invalid") != std::string::npos);
  CHECK(gc.output.find("pid 2054847098") == std::string::npos);  // "zzzz" read as a pid
  CHECK_FALSE(Segment::exists(orphan));
  CHECK(Segment::exists(junk));

  auto all = test::run_command(as_nobody(tandem + " shm gc --all-invalid"));
  INFO(all.output);
  CHECK(all.output.find("removed /" + junk + " (not a Tandem segment)") != std::string::npos);
  CHECK_FALSE(Segment::exists(junk));
  Segment::unlink(orphan);
  Segment::unlink(junk);
}

TEST_CASE("shm gc removes a job segment whose creator has exited but is not yet reaped (a zombie)" *
          doctest::timeout(60)) {
  if (!have_root()) return;
  const std::string tandem = test::tandem_binary();
  // A SIGKILLed launcher's orphaned learner is one until pid 1 reaps it; kill(pid, 0) still finds it.
  test::Child zombie = test::zombie_child();
  const std::string orphan = shm::job_segment_name(test::unique_name("owned"), shm::Kind::control);
  {
    Segment s = Segment::create(orphan, shm::Kind::control, shm::kControlLayoutVersion, 4096, "");
    s.header().creator_pid = static_cast<std::uint32_t>(zombie.pid());
    s.mark_ready();
    s.persist();
    REQUIRE(::fchown(s.fd(), kNobody, kNobody) == 0);
  }
  auto gc = test::run_command(as_nobody(tandem + " shm gc"));
  INFO(gc.output);
  CHECK(gc.status == 0);
  CHECK(gc.output.find(fmt::format("removed /{} (ready, creator pid {} is gone)", orphan, zombie.pid())) !=
        std::string::npos);
  CHECK_FALSE(Segment::exists(orphan));
  Segment::unlink(orphan);
}
