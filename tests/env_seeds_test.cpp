// Seeds in both languages: envs/seeds.hpp is the reference and python/tandem/seeds.py its mirror.
// Over one table of (job seed, actor, env, restart) cases, restarts included, both give the same env
// and action seeds, and VecEnv and VecPyEnv reset their envs from them, so a restarted Python rollout
// actor draws what a restarted C++ one does. The Python files are loaded by path, so this runs
// without the package built.
#include <doctest/doctest.h>

#include <fmt/format.h>

#include <cstdint>
#include <fstream>
#include <limits>
#include <memory>
#include <set>
#include <sstream>
#include <vector>

#include "envs/seeds.hpp"
#include "envs/vec_env.hpp"
#include "tests/harness.hpp"

using namespace tandem::envs;
using namespace tandem::test;

namespace {

struct Case {
  std::uint64_t job_seed;
  std::uint32_t actor;
  std::uint32_t env;
  std::uint32_t restarts;
};

constexpr std::uint64_t kMax64 = std::numeric_limits<std::uint64_t>::max();
constexpr std::uint32_t kMax32 = std::numeric_limits<std::uint32_t>::max();

const std::vector<Case> kCases = {
    {0, 0, 0, 0},
    {1, 0, 0, 0},
    {42, 5, 3, 0},
    {42, 5, 3, 1},
    {42, 5, 3, 2},
    {43, 5, 3, 1},
    {1, 0, 0, 2},
    {2, 0, 0, 1},
    {7, 1, 63, 1},
    {123456789, 2, 9, 3},
    {kMax64, 255, 31, 7},
    {kMax64, 0, 0, 1},
    {(1ULL << 63) + 5, 3, 17, kMax32},
    {0, 65535, 4, 100000},
};

// An env that records the first draw of the stream VecEnv resets it from.
class FirstDrawEnv : public Env {
 public:
  explicit FirstDrawEnv(std::uint64_t& first) : first_(first) {}
  const EnvSpec& spec() const override { return spec_; }
  void reset(Rng& rng, float* obs) override {
    Rng copy = rng;
    first_ = copy.next();
    obs[0] = 0.0f;
  }
  StepOut step(ActionRef, float* obs) override {
    obs[0] = 0.0f;
    return {};
  }

 private:
  EnvSpec spec_{.name = "first-draw", .obs_dim = 1, .num_actions = 2};
  std::uint64_t& first_;
};

// The first draw of env `c.env`'s stream in a C++ VecEnv of actor c.actor in incarnation c.restarts.
std::uint64_t vec_env_first_draw(const Case& c) {
  std::vector<std::uint64_t> firsts(c.env + 1);
  std::vector<std::unique_ptr<Env>> envs;
  envs.reserve(firsts.size());
  for (std::uint64_t& first : firsts) envs.push_back(std::make_unique<FirstDrawEnv>(first));
  const VecEnv vec(std::move(envs), c.job_seed, c.actor, c.restarts);
  return firsts[c.env];
}

// Per case, one line from the Python side: seeds.env_seed, seeds.action_seed, and the seed VecPyEnv
// reset env c.env with.
constexpr const char* kPythonSide = R"(import sys
sys.path.insert(0, sys.argv[1])
import numpy as np
import pyenv
import seeds

class Recorder:
    observation_space = type("Box", (), {"shape": (1,)})()
    action_space = type("Discrete", (), {"n": 2})()

    def reset(self, seed=None):
        self.seed = seed
        return np.zeros(1, np.float32), {}

for case in sys.argv[2:]:
    job, actor, env, restarts = map(int, case.split(","))
    vec = pyenv.VecPyEnv("__main__:Recorder", {}, env + 1, job, actor, restarts)
    print(seeds.env_seed(job, actor, env, restarts), seeds.action_seed(job, actor, restarts), vec.envs[env].seed)
)";

}  // namespace

TEST_CASE("seeds: the Python mirror gives every (seed, actor, env, restart) the C++ env and action seeds") {
  TempDir dir;
  std::ofstream(dir.file("python_side.py")) << kPythonSide;
  std::string command = fmt::format("{} {} {}/python/tandem", python_with_numpy(), dir.file("python_side.py"),
                                    source_root());
  for (const Case& c : kCases) command += fmt::format(" {},{},{},{}", c.job_seed, c.actor, c.env, c.restarts);
  const CommandResult r = run_command(command);
  REQUIRE_MESSAGE(r.status == 0, r.output);

  std::istringstream lines(r.output);
  for (const Case& c : kCases) {
    CAPTURE(c.job_seed);
    CAPTURE(c.actor);
    CAPTURE(c.env);
    CAPTURE(c.restarts);
    std::uint64_t py_env = 0, py_action = 0, py_vec = 0;
    REQUIRE(static_cast<bool>(lines >> py_env >> py_action >> py_vec));
    const std::uint64_t want = env_seed(c.job_seed, c.actor, c.env, c.restarts);
    CHECK(py_env == want);
    CHECK(py_vec == want);  // VecPyEnv resets from it, as VecEnv does (below)
    CHECK(py_action == action_seed(c.job_seed, c.actor, c.restarts));
    CHECK(vec_env_first_draw(c) == Rng(want).next());
  }
}

TEST_CASE("seeds: restart 0 keeps the three-index chain every run so far was seeded with") {
  for (const Case& c : kCases) {
    const std::uint64_t chain = splitmix64_mix(splitmix64_mix(splitmix64_mix(c.job_seed) + c.actor) + c.env);
    CHECK(env_seed(c.job_seed, c.actor, c.env) == chain);
    CHECK(action_seed(c.job_seed, c.actor, 0) == env_seed(c.job_seed, c.actor, kActionSeedIndex));
  }
}

TEST_CASE("seeds: a restart draws seeds of its own, apart from its first start's and from a neighbouring job seed's") {
  // Folding the restart into the job seed (seed + restarts) would give job seed 42 restarted twice
  // the envs of job seed 43 restarted once; mixing it in last keeps every incarnation apart.
  std::set<std::uint64_t> seeds;
  int count = 0;
  for (std::uint64_t job = 41; job <= 43; ++job)
    for (std::uint64_t actor = 0; actor < 4; ++actor)
      for (std::uint64_t restarts = 0; restarts < 4; ++restarts) {
        for (std::uint64_t env = 0; env < 16; ++env, ++count) seeds.insert(env_seed(job, actor, env, restarts));
        seeds.insert(action_seed(job, actor, restarts));
        ++count;
      }
  CHECK(seeds.size() == static_cast<std::size_t>(count));
  CHECK(eval_seed(42) != 42);  // evaluators play from a job seed of their own
}
