// The supervisor's restart/stop/hang policy as a table: what happened to a process, its history,
// the job's phase and the limits in; the decision out. No process is started.
#include <doctest/doctest.h>
#include <signal.h>

#include <string>
#include <vector>

#include "tools/run/exit_policy.hpp"

using namespace tandem;
using namespace tandem::run;
using namespace std::chrono_literals;
using Action = Decision::Action;
using shm::Role;

namespace {

const RestartLimits kLimits{
    .max_restarts = 3, .backoff_s = 0.5, .backoff_max_s = 4, .heartbeat_timeout_s = 10, .start_timeout_s = 30};

Exited exit_code(int code) {
  return Exited{.status = {.code = code}, .hung = {}, .signalled_for_stop = false, .last_line = {}};
}
Exited killed_by(int sig) {
  return Exited{.status = {.signal = sig}, .hung = {}, .signalled_for_stop = false, .last_line = {}};
}
Exited hung_and_killed(std::string why) {
  return Exited{.status = {.signal = SIGKILL}, .hung = std::move(why), .signalled_for_stop = false, .last_line = {}};
}
Exited signalled_for_stop(int sig) {
  return Exited{.status = {.signal = sig}, .hung = {}, .signalled_for_stop = true, .last_line = {}};
}
// It exited after the stop began without having reported itself running (a stop during its start-up).
Exited stopped_while_starting(Exited e) {
  e.stopped_while_starting = true;
  return e;
}

ProcessHistory actor(std::uint32_t restarts = 0, std::uint32_t crashes_in_row = 0, std::chrono::nanoseconds up = 1s) {
  return {.role = Role::actor,
          .restarts = restarts,
          .crashes_in_row = crashes_in_row,
          .up = up,
          .last_failure = {},
          .same_failures = 0};
}
ProcessHistory learner(std::chrono::nanoseconds up = 1s) {
  return {.role = Role::learner, .restarts = 0, .crashes_in_row = 0, .up = up, .last_failure = {}, .same_failures = 0};
}

Watched beating(std::chrono::nanoseconds since_heartbeat) {
  return {.reported_running = true, .since_heartbeat = since_heartbeat};
}
Watched starting() { return {.reported_running = false}; }

struct Row {
  const char* what;
  ProcessEvent event;
  ProcessHistory process;
  JobPhase phase;
  Action action;
  std::string reason = {};               // exactly, when given
  std::chrono::nanoseconds delay = 0ns;  // restart
  std::uint32_t crashes_in_row = 0;      // restart
  std::string note = {};
};

}  // namespace

TEST_CASE("restart policy: each exit and hang gets the decision the supervisor's contract promises") {
  const std::vector<Row> rows = {
      // Actors while the job runs: restarted with a backoff that doubles per crash in a row.
      {"an actor's first crash is restarted after the base backoff", exit_code(3), actor(), JobPhase::running,
       Action::restart, "exited with status 3", 500ms, 1},
      {"a crash within the backoff window doubles the delay", killed_by(SIGKILL), actor(2, 2, 3s), JobPhase::running,
       Action::restart, "was killed by SIGKILL", 2s, 3},
      {"the delay is capped at restart_backoff_max_s", exit_code(1), actor(2, 6), JobPhase::running, Action::restart,
       "exited with status 1", 4s, 7},
      {"a crash after a long run (past the backoff window) starts a new streak", exit_code(1), actor(2, 6, 61s),
       JobPhase::running, Action::restart, "exited with status 1", 500ms, 1},
      {"the window is never shorter than 60 s", exit_code(1), actor(2, 2, 59s), JobPhase::running, Action::restart,
       "exited with status 1", 2s, 3},
      {"a crash past max_restarts fails the job", exit_code(3), actor(3, 1), JobPhase::running, Action::fail_job,
       "exited with status 3, and it has been restarted 3 times already (run.max_restarts = 3)"},
      {"a hung actor, once killed, is restarted", hung_and_killed("hung: no heartbeat for 10.2 s"), actor(),
       JobPhase::running, Action::restart, "hung: no heartbeat for 10.2 s", 500ms, 1},
      {"an actor that exits 0 on its own is done, not restarted", exit_code(0), actor(), JobPhase::running,
       Action::done, "", 0ns, 0, "exited with status 0; it is done and not restarted"},
      // Actors while the job stops.
      {"an actor that exits 0 after the stop request is done", exit_code(0), actor(), JobPhase::stopping, Action::done},
      {"an actor crashing while the job stops fails it", exit_code(2), actor(), JobPhase::stopping, Action::fail_job,
       "exited with status 2 while stopping"},
      {"an actor that needed SIGTERM to stop fails the job", signalled_for_stop(SIGTERM), actor(), JobPhase::stopping,
       Action::fail_job, "did not exit after the stop request and was killed by SIGTERM"},
      // A signal's stop that comes during a process's start-up cuts it short: that is no failure.
      {"an actor still starting at the stop that exits 1 was stopped", stopped_while_starting(exit_code(1)), actor(),
       JobPhase::stopping, Action::done, "", 0ns, 0,
       "exited with status 1 while still starting: the job was asked to stop first, so it was stopped, not failed"},
      {"a learner still starting at the stop that exits 1 was stopped", stopped_while_starting(exit_code(1)), learner(),
       JobPhase::stopping, Action::done, "", 0ns, 0,
       "exited with status 1 while still starting: the job was asked to stop first, so it was stopped, not failed"},
      {"one still starting that needed SIGTERM to stop fails the job",
       stopped_while_starting(signalled_for_stop(SIGTERM)), learner(), JobPhase::stopping, Action::fail_job,
       "did not exit after the stop request and was killed by SIGTERM"},
      {"one still starting after a failure's stop is not excused", stopped_while_starting(exit_code(1)), learner(),
       JobPhase::failed, Action::fail_job, "exited with status 1"},
      {"after a failure, another actor's crash is not reported again", exit_code(2), actor(), JobPhase::failed,
       Action::done},
      {"after a failure, a crash is not restarted", killed_by(SIGKILL), actor(), JobPhase::failed, Action::done},
      // Actors while the job finishes (the learners are done): they still owe the final version.
      {"an actor that exits 0 while the job finishes is done", exit_code(0), actor(), JobPhase::finishing,
       Action::done},
      {"an actor killed while the job finishes is restarted to report the final version", killed_by(SIGKILL), actor(),
       JobPhase::finishing, Action::restart, "was killed by SIGKILL before it reported the final version", 500ms, 1},
      {"an actor crashing while the job finishes, past max_restarts, fails the job", exit_code(3), actor(3),
       JobPhase::finishing, Action::fail_job,
       "exited with status 3 before it reported the final version, and it has been restarted 3 times already "
       "(run.max_restarts = 3)"},
      {"an actor that needed SIGTERM while the job finishes fails it", signalled_for_stop(SIGTERM), actor(),
       JobPhase::finishing, Action::fail_job, "did not exit after the stop request and was killed by SIGTERM"},
      {"a learner that exits 0 while the job finishes is done", exit_code(0), learner(), JobPhase::finishing,
       Action::done},
      // Learners.
      {"a learner that exits 0 has finished", exit_code(0), learner(), JobPhase::running, Action::finished, "", 0ns, 0,
       "finished"},
      {"a learner that exits 0 after the stop request is done", exit_code(0), learner(), JobPhase::stopping,
       Action::done},
      {"a learner's non-zero exit fails the job", exit_code(1), learner(), JobPhase::running, Action::fail_job,
       "exited with status 1"},
      {"a learner killed by a signal fails the job", killed_by(SIGSEGV), learner(), JobPhase::running, Action::fail_job,
       "was killed by SIGSEGV"},
      {"a hung learner, once killed, fails the job", hung_and_killed("hung: no heartbeat for 12.0 s"), learner(),
       JobPhase::running, Action::fail_job, "hung: no heartbeat for 12.0 s"},
      {"a learner crashing while the job stops fails it", exit_code(1), learner(), JobPhase::stopping, Action::fail_job,
       "exited with status 1"},
      {"a learner crashing after another failure still counts as a failure", killed_by(SIGKILL), learner(),
       JobPhase::failed, Action::fail_job, "was killed by SIGKILL"},
      // Hang checks.
      {"an actor whose heartbeat is older than the timeout is killed as hung", beating(10500ms), actor(),
       JobPhase::running, Action::kill_hung, "hung: no heartbeat for 10.5 s (run.heartbeat_timeout_s = 10)"},
      {"a learner whose heartbeat is older than the timeout is killed as hung", beating(11s), learner(),
       JobPhase::running, Action::kill_hung, "hung: no heartbeat for 11.0 s (run.heartbeat_timeout_s = 10)"},
      {"a hang is detected while the job stops, too", beating(11s), learner(), JobPhase::stopping, Action::kill_hung,
       "hung: no heartbeat for 11.0 s (run.heartbeat_timeout_s = 10)"},
      {"a recent heartbeat is fine", beating(9s), actor(), JobPhase::running, Action::ignore},
      {"a process already killed is left to exit",
       Watched{.reported_running = true, .since_heartbeat = 60s, .already_killed = true}, actor(), JobPhase::running,
       Action::ignore},
      {"a process that never reports running is killed at the start timeout", starting(), learner(31s),
       JobPhase::running, Action::kill_hung,
       "did not report itself running within 30 s of its start (run.start_timeout_s)"},
      {"a process still starting within the start timeout is fine", starting(), actor(0, 0, 29s), JobPhase::running,
       Action::ignore},
  };
  for (const auto& row : rows) {
    CAPTURE(row.what);
    const Decision d = decide(row.event, row.process, row.phase, kLimits);
    CHECK(d.action == row.action);
    CHECK(d.reason == row.reason);
    CHECK(d.note == row.note);
    if (row.action == Action::restart) {
      CHECK(d.delay == row.delay);
      CHECK(d.crashes_in_row == row.crashes_in_row);
    }
  }
}

TEST_CASE("restart policy: a timeout of 0 turns its check off") {
  RestartLimits off = kLimits;
  off.heartbeat_timeout_s = 0;
  off.start_timeout_s = 0;
  CHECK(decide(beating(1h), actor(), JobPhase::running, off).action == Action::ignore);
  CHECK(decide(starting(), learner(1h), JobPhase::running, off).action == Action::ignore);
}

TEST_CASE("restart policy: max_restarts = 0 fails the job at an actor's first crash") {
  RestartLimits none = kLimits;
  none.max_restarts = 0;
  const Decision d = decide(exit_code(3), actor(), JobPhase::running, none);
  CHECK(d.action == Action::fail_job);
  CHECK(d.reason == "exited with status 3, and it has been restarted 0 times already (run.max_restarts = 0)");
}

namespace {
Exited crash_saying(int code, std::string last_line) {
  return Exited{.status = {.code = code}, .hung = {}, .signalled_for_stop = false, .last_line = std::move(last_line)};
}
ProcessHistory failed_before(const Exited& e, std::uint32_t times) {
  ProcessHistory p = actor(times, times);
  p.last_failure = failure_signature(e);
  p.same_failures = times;
  return p;
}
}  // namespace

TEST_CASE("restart policy: an actor failing the same way 3 times in a row fails the job, whatever max_restarts") {
  RestartLimits many = kLimits;
  many.max_restarts = 100;
  const Exited label_crash = crash_saying(1, "[actor.0] error: label -7 is outside [0, 10)");
  const Decision first = decide(label_crash, actor(), JobPhase::running, many);
  CHECK(first.action == Action::restart);
  CHECK(first.same_failures == 1);
  CHECK(first.failure == failure_signature(label_crash));
  const Decision second = decide(label_crash, failed_before(label_crash, 1), JobPhase::running, many);
  CHECK(second.action == Action::restart);
  CHECK(second.same_failures == 2);
  const Decision third = decide(label_crash, failed_before(label_crash, 2), JobPhase::running, many);
  CHECK(third.action == Action::fail_job);
  CHECK(third.reason ==
        "exited with status 1 3 times in a row, the same way each time: restarting it again would not help");
  // The same while the job finishes: a crash loop cannot hold the job's end hostage either.
  CHECK(decide(label_crash, failed_before(label_crash, 2), JobPhase::finishing, many).action == Action::fail_job);
}

TEST_CASE("restart policy: a failure that differs (status or last line) starts a new count") {
  const Exited a = crash_saying(1, "out of memory");
  CHECK(decide(crash_saying(1, "segfault in batch 3"), failed_before(a, 2), JobPhase::running, kLimits).same_failures ==
        1);
  CHECK(decide(crash_saying(2, "out of memory"), failed_before(a, 2), JobPhase::running, kLimits).same_failures == 1);
  CHECK(decide(killed_by(SIGKILL), failed_before(a, 2), JobPhase::running, kLimits).action == Action::restart);
}

TEST_CASE("duty check: the job succeeds only when every actor reported the learners' final version") {
  CHECK_FALSE(unmet_duty({}, 42).has_value());
  CHECK_FALSE(unmet_duty({{.name = "actor.0", .reported_version = 42, .last_exit = "exited with status 0"},
                          {.name = "actor.1", .reported_version = 43, .last_exit = "exited with status 0"}},
                         42)
                  .has_value());
  const auto missing = unmet_duty({{.name = "actor.0", .reported_version = 42, .last_exit = "exited with status 0"},
                                   {.name = "actor.1", .reported_version = 40, .last_exit = "was killed by SIGKILL"},
                                   {.name = "actor.2", .reported_version = 0, .last_exit = "exited with status 0"}},
                                  42);
  REQUIRE(missing.has_value());
  CHECK(*missing ==
        "actor.1 never evaluated the final version 42: its last was version 40, and it was killed by SIGKILL; "
        "actor.2 never evaluated the final version 42: it reported no version, and it exited with status 0");
}
