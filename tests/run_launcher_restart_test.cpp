// `tandem run` restarting actors: after a SIGKILL, after a hang, and up to run.max_restarts.
#include <doctest/doctest.h>
#include <signal.h>
#include <unistd.h>

#include <fmt/format.h>

#include "tests/run_launcher_fixture.hpp"

using namespace tandem;
using namespace tandem::test;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

TEST_CASE("tandem run: an actor SIGKILLed mid-run is restarted and the job still succeeds" * doctest::timeout(90)) {
  JobFixture f;
  Launcher run({f.write()});
  REQUIRE(run.wait_for_output("[actor.1] actor 1 running (restart 0)"));
  const pid_t victim = f.process("actor", 1).pid;
  REQUIRE(victim > 0);
  ::kill(victim, SIGKILL);
  CHECK(run.wait_for_output("[actor.1] actor 1 running (restart 1)"));
  const int status = run.wait();
  const std::string out = run.output();
  CAPTURE(out);
  CHECK(status == 0);
  CHECK(out.find(fmt::format("actor.1 (pid {}) was killed by SIGKILL: restarting it", victim)) != std::string::npos);
  CHECK(out.find("[learner.0] training done") != std::string::npos);
  CHECK(out.find("succeeded") != std::string::npos);
  CHECK(out.rfind("succeeded") > out.rfind("[actor.1] actor stopping"));  // success is printed last
  CHECK(segments_of(f.job).empty());
  const std::string metrics = read_file(f.run_dir() / "metrics.jsonl");
  CHECK(metrics.find("\"event\":\"spawn\",\"process\":\"actor.1\"") != std::string::npos);
  CHECK(metrics.find("\"restarts\":1") != std::string::npos);
  CHECK(metrics.find("\"process\":\"learner.0\",\"role\":\"learner\",\"step\":") != std::string::npos);
  CHECK(metrics.find("\"accuracy\":") != std::string::npos);
  CHECK(metrics.find("\"outcome\":\"succeeded\"") != std::string::npos);
  CHECK(fs::exists(f.run_dir() / "config.toml"));
  CHECK(read_file(f.run_dir() / "job.toml").find("[run]") == std::string::npos);
}

TEST_CASE("tandem run: a hung actor (no heartbeat) is killed and restarted" * doctest::timeout(90)) {
  JobFixture f;
  f.keys["heartbeat_timeout_s"] = "1";
  f.keys["actors"] = "1";
  f.keys["actor_args"] = "\"--tandem-child=fake-actor mode=hang-once\"";
  f.keys["learner_args"] = "\"--tandem-child=fake-learner steps=200 step_ms=20\"";
  Launcher run({f.write()});
  const int status = run.wait();
  const std::string out = run.output();
  CAPTURE(out);
  CHECK(status == 0);
  CHECK(out.find("[actor.0] hanging now") != std::string::npos);
  CHECK(out.find("hung: no heartbeat for") != std::string::npos);
  CHECK(out.find("(run.heartbeat_timeout_s = 1): killing it") != std::string::npos);
  CHECK(out.find("[actor.0] actor 0 running (restart 1)") != std::string::npos);
  CHECK(out.find("succeeded") != std::string::npos);
  CHECK(segments_of(f.job).empty());
}

TEST_CASE("tandem run: an actor that keeps crashing fails the job at the restart limit" * doctest::timeout(90)) {
  JobFixture f;
  f.keys["actors"] = "1";
  f.keys["max_restarts"] = "2";
  f.keys["actor_args"] = "\"--tandem-child=fake-actor mode=crash\"";
  f.keys["learner_args"] = "\"--tandem-child=fake-learner steps=100000 step_ms=20\"";
  Launcher run({f.write()});
  const int status = run.wait();
  const std::string out = run.output();
  CAPTURE(out);
  CHECK(status == 1);
  CHECK(out.find("restart 2 of at most 2") != std::string::npos);
  CHECK(out.find("exited with status 3, and it has been restarted 2 times already (run.max_restarts = 2)") !=
        std::string::npos);
  CHECK(out.find("  | simulated crash") != std::string::npos);
  CHECK(out.find("[learner.0] stop requested: checkpoint at step") != std::string::npos);
  CHECK(segments_of(f.job).empty());
}

TEST_CASE("tandem run: an actor that fails the same way every try fails the job after 3 tries, with its last lines" *
          doctest::timeout(90)) {
  JobFixture f;
  f.keys["actors"] = "1";
  f.keys["max_restarts"] = "10";
  f.keys["restart_backoff_s"] = "0.1";
  f.keys["actor_args"] = "\"--tandem-child=fake-actor mode=crash\"";
  f.keys["learner_args"] = "\"--tandem-child=fake-learner steps=100000 step_ms=20\"";
  Launcher run({f.write()});
  const int status = run.wait();
  const std::string out = run.output();
  CAPTURE(out);
  CHECK(status == 1);
  CHECK(out.find("restart 2 of at most 10") != std::string::npos);
  CHECK(out.find("restart 3 of at most 10") == std::string::npos);
  CHECK(out.find("actor.0 (pid") != std::string::npos);
  CHECK(out.find("exited with status 3 3 times in a row, the same way each time") != std::string::npos);
  CHECK(out.find("  | simulated crash") != std::string::npos);
  CHECK(out.find("succeeded") == std::string::npos);
  CHECK(segments_of(f.job).empty());
}

// The learner finishes while the actor's restart is pending: the restart still happens, the new
// actor evaluates the final version, and the job succeeds; never a success with the duty undone.
TEST_CASE("tandem run: an actor killed just before the learner finishes is restarted to evaluate the final version" *
          doctest::timeout(90)) {
  JobFixture f;
  f.keys["actors"] = "1";
  f.keys["restart_backoff_s"] = "1";
  f.keys["learner_args"] = "\"--tandem-child=fake-learner steps=100 step_ms=20\"";
  Launcher run({f.write()});
  REQUIRE(run.wait_for_output("[learner.0] step 90"));  // ~0.2 s before it finishes, well within the backoff
  const pid_t victim = f.process("actor", 0).pid;
  REQUIRE(victim > 0);
  ::kill(victim, SIGKILL);
  const int status = run.wait();
  const std::string out = run.output();
  CAPTURE(out);
  CHECK(status == 0);
  CHECK(out.find("[actor.0] actor 0 running (restart 1)") != std::string::npos);
  CHECK(out.rfind("[actor.0] actor 0 running (restart 1)") > out.find("learner.0 finished"));
  CHECK(out.find("[actor.0] actor evaluated version 10") != std::string::npos);  // fake-learner: step / 10
  CHECK(out.find("succeeded") != std::string::npos);
  CHECK(segments_of(f.job).empty());
}

TEST_CASE("tandem run: an actor that never evaluates the final version fails the job, saying what is missing" *
          doctest::timeout(90)) {
  JobFixture f;
  f.keys["actors"] = "1";
  f.keys["actor_args"] = "\"--tandem-child=fake-actor mode=quit\"";
  f.keys["learner_args"] = "\"--tandem-child=fake-learner steps=100 step_ms=20\"";
  Launcher run({f.write()});
  const int status = run.wait();
  const std::string out = run.output();
  CAPTURE(out);
  CHECK(status == 1);
  CHECK(out.find("[actor.0] quitting early") != std::string::npos);
  CHECK(out.find("actor.0 never evaluated the final version 10: ") != std::string::npos);
  CHECK(out.find("and it exited with status 0") != std::string::npos);
  CHECK(out.find("succeeded") == std::string::npos);
  CHECK(segments_of(f.job).empty());
}
