// `tandem run` ending a job: a learner's death fails it, SIGINT stops it cleanly, a process that
// ignores the stop request is terminated; never a segment left behind.
#include <doctest/doctest.h>
#include <signal.h>
#include <unistd.h>

#include <fmt/format.h>

#include <fstream>

#include "tests/run_launcher_fixture.hpp"

using namespace tandem;
using namespace tandem::test;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

TEST_CASE("tandem run: a learner SIGKILLed fails the job within 10 s, naming it, with its segments removed" *
          doctest::timeout(90)) {
  JobFixture f;
  f.keys["learner_args"] = "\"--tandem-child=fake-learner steps=100000 step_ms=20\"";
  Launcher run({f.write()});
  REQUIRE(run.wait_for_output("[learner.0] step 20"));
  CHECK(shm::Segment::exists(shm::job_segment_name(f.job, shm::Kind::weights)));  // made by the learner
  const pid_t victim = f.process("learner", 0).pid;
  REQUIRE(victim > 0);
  const auto killed_at = std::chrono::steady_clock::now();
  ::kill(victim, SIGKILL);
  const int status = run.wait(30s);
  const auto took = std::chrono::steady_clock::now() - killed_at;
  const std::string out = run.output();
  CAPTURE(out);
  CHECK(status == 1);
  CHECK(took < 10s);
  CHECK(out.find(fmt::format("job {} failed", f.job)) != std::string::npos);
  CHECK(out.find(fmt::format("learner.0 (pid {}) was killed by SIGKILL; its last", victim)) != std::string::npos);
  CHECK(out.find("  | step 20") != std::string::npos);
  CHECK(out.find("succeeded") == std::string::npos);
  CHECK(segments_of(f.job).empty());
}

TEST_CASE("tandem run: SIGINT makes the learner checkpoint and exit, the launcher exit 130, nothing left" *
          doctest::timeout(90)) {
  JobFixture f;
  f.keys["learner_args"] = "\"--tandem-child=fake-learner steps=100000 step_ms=20\"";
  Launcher run({f.write()});
  REQUIRE(run.wait_for_output("[learner.0] step 20"));
  REQUIRE(run.wait_for_output("[actor.1] actor 1 running"));
  ::kill(run.pid(), SIGINT);
  const int status = run.wait(30s);
  const std::string out = run.output();
  CAPTURE(out);
  CHECK(status == 130);
  CHECK(out.find("[learner.0] stop requested: checkpoint at step") != std::string::npos);
  CHECK(out.find("[actor.0] actor stopping") != std::string::npos);
  CHECK(out.find("stopped by SIGINT") != std::string::npos);
  CHECK(out.find("succeeded") == std::string::npos);
  CHECK(read_file(f.run_dir() / "checkpoint.txt").starts_with("step "));
  CHECK(segments_of(f.job).empty());
}

TEST_CASE("tandem run: a learner that ignores the stop request is terminated and the job fails" *
          doctest::timeout(60)) {
  JobFixture f;
  f.keys["actors"] = "0";
  f.keys["stop_timeout_s"] = "1";
  f.keys["kill_timeout_s"] = "1";
  f.keys["learner_program"] = "\"/bin/sh\"";
  // A program that knows nothing of the control block: it never reports running, so no start timeout.
  f.keys["start_timeout_s"] = "0";
  f.keys["learner_args"] = "\"" + (f.dir / "spin.sh").string() + "\"";
  std::ofstream(f.dir / "spin.sh") << "trap '' INT\necho spinning\nwhile true; do sleep 0.05; done\n";
  Launcher run({f.write()});
  REQUIRE(run.wait_for_output("[learner.0] spinning"));
  ::kill(run.pid(), SIGINT);
  const int status = run.wait(30s);
  const std::string out = run.output();
  CAPTURE(out);
  CHECK(status == 1);
  CHECK(out.find("learner.0") != std::string::npos);
  CHECK(out.find("has not exited: sending SIGTERM") != std::string::npos);
  CHECK(out.find("was killed by SIGTERM") != std::string::npos);
  CHECK(segments_of(f.job).empty());
}
