// `tandem run` with program groups ([run.learner] command, [[run.group]]): the environment each
// process gets, a user actor killed or stopped, a user learner rank killed, and the bad inputs of
// docs/RUN.md "Bad input" (a command that is missing or not executable, a Python script that raises at import, a
// program that exits 0 at once or never joins). In every case nothing is left in /dev/shm.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "common/process.hpp"
#include "tests/run_launcher_fixture.hpp"

using namespace tandem;
using namespace tandem::test;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// A [[run.group]] of `count` processes of this test binary as the stand-in `child` (run_launcher_children.cpp).
std::string self_group(const std::string& name, int count, const std::string& child, bool heartbeat = true) {
  std::string argv = fmt::format("\"{}\"", self_exe().string());
  std::istringstream words("--tandem-child=" + child);
  for (std::string w; words >> w;) argv += fmt::format(", \"{}\"", w);
  return fmt::format("[[run.group]]\nname = \"{}\"\ncount = {}\ncommand = [{}]\nheartbeat = {}\n", name, count, argv,
                     heartbeat);
}

// A group whose command is `sh -c SCRIPT` (supervised by exit status only).
std::string shell_group(const std::string& name, int count, const std::string& script) {
  return fmt::format(
      "[[run.group]]\nname = \"{}\"\ncount = {}\ncommand = [\"/bin/sh\", \"-c\", '{}']\nheartbeat = false\n", name,
      count, script);
}

}  // namespace

TEST_CASE("program groups: each group starts its count of its command, with its group, index and role's variables" *
          doctest::timeout(90)) {
  JobFixture f;
  f.keys["actors"] = "1";
  f.keys["learner_args"] = "\"--tandem-child=fake-learner steps=60 step_ms=20\"";
  f.tables = shell_group("logger", 2,
                         "echo env $TANDEM_GROUP $TANDEM_GROUP_INDEX/$TANDEM_GROUP_SIZE role=$TANDEM_ROLE "
                         "index=$TANDEM_INDEX arg={index} rank=${RANK:-none}; sleep 60") +
             self_group("worker", 1, "fake-actor mode=normal");
  Launcher run({f.write()});
  REQUIRE(run.wait_for_output("[worker.0] actor 3 running (restart 0)"));
  const std::string table = [&] {
    auto block = shm::ControlBlock::attach(f.job, shm::Segment::Access::read_only);
    return block.snapshot(4).name() + " " + block.snapshot(3).name() + " " + block.snapshot(1).name();
  }();
  CHECK(table == "worker.0 logger.1 actor.0");
  const int status = run.wait();
  const std::string out = run.output();
  CAPTURE(out);
  CHECK(status == 0);
  CHECK(has(out, "1 learner, 1 actor, 2 loggers, 1 worker"));
  CHECK(has(out, "[logger.0] env logger 0/2 role=actor index=1 arg=0 rank=none"));
  CHECK(has(out, "[logger.1] env logger 1/2 role=actor index=2 arg=1 rank=none"));
  CHECK(has(out, "| logger 2/2 | worker 1/1"));  // the status line counts each group
  CHECK(has(out, "succeeded"));
  CHECK(!has(out, "has not exited"));  // the loggers stopped on SIGTERM, their stop request
  CHECK(segments_of(f.job).empty());
  CHECK(has(read_file(f.run_dir() / "metrics.jsonl"), "\"process\":\"worker.0\""));
  CHECK(has(read_file(f.run_dir() / "config.toml"), "name = 'logger'"));
}

TEST_CASE("program groups: a SIGKILLed user actor is restarted and the job succeeds" * doctest::timeout(90)) {
  JobFixture f;
  f.keys["actors"] = "0";
  f.tables = self_group("worker", 2, "fake-actor mode=normal");
  Launcher run({f.write()});
  REQUIRE(run.wait_for_output("[worker.1] actor 1 running (restart 0)"));
  const pid_t victim = f.process("actor", 1).pid;
  REQUIRE(victim > 0);
  ::kill(victim, SIGKILL);
  CHECK(run.wait_for_output("[worker.1] actor 1 running (restart 1)"));
  const int status = run.wait();
  const std::string out = run.output();
  CAPTURE(out);
  CHECK(status == 0);
  CHECK(has(out, fmt::format("worker.1 (pid {}) was killed by SIGKILL: restarting it", victim)));
  CHECK(has(out, "succeeded"));
  CHECK(segments_of(f.job).empty());
}

TEST_CASE("program groups: a SIGSTOPped user actor that joined is detected as hung and restarted" *
          doctest::timeout(90)) {
  JobFixture f;
  f.keys["actors"] = "0";
  f.keys["heartbeat_timeout_s"] = "1";
  f.keys["learner_args"] = "\"--tandem-child=fake-learner steps=250 step_ms=20\"";
  f.tables = self_group("worker", 1, "fake-actor mode=normal");
  Launcher run({f.write()});
  REQUIRE(run.wait_for_output("[worker.0] actor 0 running (restart 0)"));
  const pid_t victim = f.process("actor", 0).pid;
  ::kill(victim, SIGSTOP);
  CHECK(run.wait_for_output(fmt::format("worker.0 (pid {}) hung: no heartbeat", victim), 10s));
  CHECK(run.wait_for_output("[worker.0] actor 0 running (restart 1)"));
  const int status = run.wait();
  const std::string out = run.output();
  CAPTURE(out);
  CHECK(status == 0);
  CHECK(segments_of(f.job).empty());
}

TEST_CASE("program groups: a user learner rank killed fails the job within 10 s, naming it" * doctest::timeout(90)) {
  JobFixture f;
  f.keys["learners"] = "2";
  f.keys["actors"] = "0";
  f.keys.erase("learner_program");
  f.keys.erase("learner_args");
  f.tables =
      "[run.learner]\ncommand = [\"/bin/sh\", \"-c\", 'echo rank $RANK of $WORLD_SIZE local $LOCAL_RANK/$LOCAL_WORLD_SIZE "
      "at $MASTER_ADDR group $TANDEM_GROUP; exec sleep 60']\nheartbeat = false\n";
  Launcher run({f.write()});
  REQUIRE(run.wait_for_output("[learner.1] rank 1 of 2 local 1/2 at 127.0.0.1 group learner"));
  const pid_t victim = f.process("learner", 1).pid;
  const auto killed = std::chrono::steady_clock::now();
  ::kill(victim, SIGKILL);
  const int status = run.wait(20s);
  const auto took = std::chrono::steady_clock::now() - killed;
  const std::string out = run.output();
  CAPTURE(out);
  CHECK(status == 1);
  CHECK(took < 10s);
  CHECK(has(out, fmt::format("failed after")));
  CHECK(has(out, fmt::format("learner.1 (pid {}) was killed by SIGKILL", victim)));
  CHECK(segments_of(f.job).empty());
}

TEST_CASE("program groups: a program that never joins though it said it would is killed as hung, naming the fix" *
          doctest::timeout(90)) {
  JobFixture f;
  f.keys["actors"] = "0";
  f.keys["start_timeout_s"] = "1";
  f.keys["max_restarts"] = "1";
  f.keys["learner_args"] = "\"--tandem-child=fake-learner steps=400 step_ms=20\"";
  f.tables = "[[run.group]]\nname = \"mute\"\ncommand = [\"/bin/sleep\", \"30\"]\n";
  Launcher run({f.write()});
  const int status = run.wait();
  const std::string out = run.output();
  CAPTURE(out);
  CHECK(status == 1);
  CHECK(has(out, "mute.0 (pid"));
  CHECK(has(out, "did not report itself running within 1 s"));
  CHECK(has(out, "or set heartbeat = false in run.group \"mute\""));
  CHECK(segments_of(f.job).empty());
}

TEST_CASE("program groups: a program that exits 0 at once is done, with a line naming the likely cause" *
          doctest::timeout(90)) {
  JobFixture f;
  f.keys["actors"] = "0";
  f.tables = "[[run.group]]\nname = \"quick\"\ncommand = [\"/bin/true\"]\n";
  Launcher run({f.write()});
  const int status = run.wait();
  const std::string out = run.output();
  CAPTURE(out);
  CHECK(status == 0);
  CHECK(has(out, "quick.0 (pid"));
  CHECK(has(out, "exited with status 0 without joining the job"));
  CHECK(has(out, "set heartbeat = false in run.group \"quick\""));
  CHECK(segments_of(f.job).empty());
}

TEST_CASE("program groups: a Python script that raises at import fails the job after the same failure thrice" *
          doctest::timeout(90)) {
  JobFixture f;
  f.keys["actors"] = "0";
  f.keys["learner_args"] = "\"--tandem-child=fake-learner steps=2000 step_ms=20\"";
  const fs::path script = f.dir / "broken.py";
  std::ofstream(script) << "import no_such_module_for_tandem\n";
  f.tables = fmt::format("[[run.group]]\nname = \"broken\"\ncommand = [\"/usr/bin/python3\", \"{}\"]\n",
                         script.string());
  Launcher run({f.write()});
  const int status = run.wait();
  const std::string out = run.output();
  CAPTURE(out);
  CHECK(status == 1);
  CHECK(has(out, "broken.0 (pid"));
  CHECK(has(out, "3 times in a row, the same way each time"));
  CHECK(has(out, "ModuleNotFoundError"));
  CHECK(segments_of(f.job).empty());
}

TEST_CASE("program groups: a bad command or group is one line naming it and the fix, before anything starts" *
          doctest::timeout(60)) {
  const fs::path not_exec = fs::temp_directory_path() / unique_name("notexec");
  std::ofstream(not_exec) << "#!/bin/sh\n";
  ::chmod(not_exec.c_str(), 0644);
  struct Row {
    std::string tables, expect;
  };
  const std::vector<Row> rows = {
      {"[[run.group]]\nname = \"x\"\ncommand = [\"no-such-program-tandem\"]\n",
       "run.group \"x\": command[0] = \"no-such-program-tandem\" was found neither next to"},
      {fmt::format("[[run.group]]\nname = \"x\"\ncommand = [\"{}\"]\n", not_exec.string()),
       "is not an executable file: build it or fix the path"},
      {"[[run.group]]\nname = \"x\"\ncommand = [\"/usr/bin/python3\", \"no_such_script.py\"]\n",
       "run.group \"x\": the Python script \"no_such_script.py\" does not exist"},
      {"[[run.group]]\nname = \"x\"\ncommand = []\n", "run.group \"x\": command must be a non-empty list"},
      {"[[run.group]]\nname = \"x\"\ncommand = \"/bin/true\"\n", "run.group \"x\": command must be a non-empty list"},
      {"[[run.group]]\nname = \"Bad Name\"\ncommand = [\"/bin/true\"]\n", "is not a group name"},
      {"[[run.group]]\nname = \"actor\"\ncommand = [\"/bin/true\"]\n", "the name is the built-in actor group's"},
      {"[[run.group]]\nname = \"x\"\nrole = \"learner\"\ncommand = [\"/bin/true\"]\n",
       "give its command in [run.learner]"},
      {"[[run.group]]\nname = \"x\"\ncount = -1\ncommand = [\"/bin/true\"]\n", "count must be an integer in [0, 4096]"},
      {"[[run.group]]\nname = \"x\"\ncommand = [\"/bin/true\"]\nheartbeats = true\n", "unknown key 'heartbeats'"},
      {"[[run.group]]\nname = \"x\"\ncommand = [\"/bin/true\"]\n[[run.group]]\nname = \"x\"\ncommand = [\"/bin/true\"]\n",
       "run.group \"x\" is given twice"},
      {"[run.learner]\ncommand = [\"/bin/true\"]\n", "run.learner.command and run.learner_program/run.learner_args"},
  };
  for (const auto& row : rows) {
    JobFixture f;
    f.tables = row.tables;
    Launcher run({f.write()});
    const int status = run.wait();
    const std::string out = run.output();
    CAPTURE(row.tables);
    CAPTURE(out);
    CHECK(status == 1);
    CHECK(has(out, row.expect));
    CHECK(std::count(out.begin(), out.end(), '\n') == 1);
    CHECK(!fs::exists(f.dir / "runs"));
    CHECK(segments_of(f.job).empty());
  }
  fs::remove(not_exec);
}

TEST_CASE("program groups: --set run.group.NAME.KEY changes that group, and a name no group has is refused" *
          doctest::timeout(90)) {
  JobFixture f;
  f.keys["actors"] = "0";
  f.keys["learner_args"] = "\"--tandem-child=fake-learner steps=40 step_ms=20\"";
  f.tables = shell_group("logger", 1, "echo logger {index} up; sleep 60");
  Launcher run({f.write(), "--set", "run.group.logger.count=3"});
  const int status = run.wait();
  const std::string out = run.output();
  CAPTURE(out);
  CHECK(status == 0);
  CHECK(has(out, "1 learner, 3 loggers"));
  CHECK(has(out, "[logger.2] logger 2 up"));
  CHECK(has(read_file(f.run_dir() / "config.toml"), "count = 3"));

  const std::vector<std::pair<std::string, std::string>> refused = {
      {"run.group.nope.count=2",
       "--set run.group.nope.count=2: no [[run.group]] is named \"nope\" (the config's "
       "groups: logger)"},
      {"run.group.count=2", "name the group and its key, e.g. --set run.group.logger.count=2"},
      {"run.group.logger.counts=2", "unknown key 'counts'"},
      {"run.group=[]", "set one key of the table"},
  };
  for (const auto& [assignment, expect] : refused) {
    JobFixture bad;
    bad.tables = f.tables;
    Launcher refuse({bad.write(), "--set", assignment});
    const int refused_status = refuse.wait();
    const std::string said = refuse.output();
    CAPTURE(said);
    CHECK(refused_status == 1);
    CHECK(has(said, expect));
    CHECK(std::count(said.begin(), said.end(), '\n') == 1);
    CHECK(segments_of(bad.job).empty());
  }
}
