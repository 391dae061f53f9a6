// `tandem run` refusing an RL job its rollout actors could only fail at: each is one line naming the
// key, exit 1, no run directory, nothing in /dev/shm; and an RL job needs no dataset cache.
#include <doctest/doctest.h>

#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/harness.hpp"

namespace {

using namespace tandem;
namespace fs = std::filesystem;

// Programs are /bin/true: nothing may start when the check fails. No [data]: no cache exists.
struct RlJob {
  test::TempDir dir;
  std::string job = test::unique_name("rl-check");
  std::string config() const {
    std::string path = dir.file("job.toml");
    std::ofstream(path) << fmt::format(R"([run]
job = "{}"
unique_id = false
actors = 3
learner_program = "/bin/true"
actor_program = "/bin/true"
runs_dir = "{}"
status = "off"
[learner]
algo = "ppo"
[model]
name = "actor_critic_mlp"
[actor]
role = "rollout"
evaluators = 1
)",
                                       job, (dir / "runs").string());
    return path;
  }
  bool left_nothing() const {
    for (const auto& e : fs::directory_iterator("/dev/shm"))
      if (e.path().filename().string().find(job) != std::string::npos) return false;
    return !fs::exists(dir / "runs" / job);
  }
};

test::CommandResult run_tandem(const std::string& config, const std::vector<std::string>& set) {
  std::string cmd = test::tandem_binary() + " run '" + config + "'";
  for (const auto& s : set) cmd += " --set '" + s + "'";
  return test::run_command(cmd);
}

}  // namespace

TEST_CASE("tandem run: an RL job that cannot roll out is one line naming the key, before anything exists" *
          doctest::timeout(120)) {
  RlJob job;
  const std::string config = job.config();
  struct Row {
    std::vector<std::string> set;
    std::string expect;
  };
  const std::vector<Row> rows = {
      {{"actor.role=evaluator"}, "learner.algo = \"ppo\" learns from rollout actors: set actor.role = \"rollout\""},
      {{"actor.evaluators=3"}, "actor.evaluators = 3 leaves no rollout actor among run.actors = 3"},
      {{"model.name=mlp"}, "model.name = \"mlp\" has no value head"},
      {{"env.name=plugin"}, "env.name = \"plugin\" but env.plugin is empty"},
      {{"env.name=plugin", "env.plugin=/nonexistent/libenv.so"},
       "env.plugin = \"/nonexistent/libenv.so\" is not a file"},
      {{"env.plugin=/tmp/libenv.so"}, "env.plugin = \"/tmp/libenv.so\" is set but env.name = \"cartpole\""},
      {{"run.deterministic=true", "rl.slots_per_update=3"},
       "rl.slots_per_update = 3 to be a multiple of the 2 rollout"},
      {{"learner.algo=supervised", "data.name=nothing-here"}, "actor.role = \"rollout\" needs a learner that learns"},
  };
  for (const Row& row : rows) {
    CAPTURE(row.expect);
    const test::CommandResult r = run_tandem(config, row.set);
    CAPTURE(r.output);
    CHECK(r.status == 1);
    CHECK(r.output.find(row.expect) != std::string::npos);
    CHECK(r.output.find('\n') == r.output.size() - 1);  // exactly one line
    CHECK(job.left_nothing());
  }
}

TEST_CASE("tandem run: an RL job with its plugin present needs no dataset cache and starts" * doctest::timeout(60)) {
  RlJob job;
  const char* plugin = std::getenv("TANDEM_CORRIDOR_PLUGIN");
  REQUIRE(plugin != nullptr);
  const test::CommandResult r = run_tandem(
      job.config(), {"env.name=plugin", std::string("env.plugin=") + plugin, "run.max_restarts=0"});
  CAPTURE(r.output);
  CHECK(r.output.find("data.name") == std::string::npos);       // nothing asked for a dataset cache
  CHECK(r.output.find("job " + job.job) != std::string::npos);  // the launcher got as far as starting it
}
