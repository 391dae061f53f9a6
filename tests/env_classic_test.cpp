// The built-in envs against tests/env_reference.py, an independent numpy implementation of the
// published equations: whole trajectories with auto-resets, terminations and time limits.
#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <functional>
#include <sstream>

#include "envs/vec_env.hpp"
#include "tests/harness.hpp"

using namespace tandem::envs;
using namespace tandem::test;

namespace {

// Picks the action from the observation, the episode's index and a random word: alternating random
// episodes (which end early) with a controller's (which run into the time limit) covers both ends.
using Policy = std::function<float(const float* obs, int episode, std::uint64_t random)>;

std::vector<std::vector<double>> parse_lines(const std::string& text) {
  std::vector<std::vector<double>> rows;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream fields(line);
    std::vector<double> row;
    for (std::string field; fields >> field;) row.push_back(std::stod(field));
    rows.push_back(std::move(row));
  }
  return rows;
}

// float32 results within 1e-5 relative (plus a floor for values near zero); nan matches nan.
bool close(double got, double want) {
  if (std::isnan(want)) return std::isnan(got);
  return std::abs(got - want) <= 1e-5 * std::abs(want) + 1e-6;
}

struct Golden {
  int terminations = 0;
  int truncations = 0;
};

Golden check_against_reference(const std::string& name, int steps, const Policy& policy) {
  constexpr std::uint64_t job_seed = 20261123;
  std::vector<std::unique_ptr<Env>> one;
  one.push_back(make_env(name));
  VecEnv vec(std::move(one), job_seed, 3);
  const EnvSpec& spec = vec.spec();
  const int dim = spec.obs_dim;
  std::vector<std::vector<double>> ours{{vec.observations().begin(), vec.observations().end()}};
  std::vector<float> actions;
  std::uint64_t random = 1;
  int episode = 0;
  Golden seen;
  for (int t = 0; t < steps; ++t) {
    random = random * 6364136223846793005ULL + 1442695040888963407ULL;
    const float a = policy(vec.observations().data(), episode, random >> 33);
    actions.push_back(a);
    const std::int32_t index = static_cast<std::int32_t>(a);
    const bool stepped = spec.discrete() ? vec.step(std::span<const std::int32_t>(&index, 1))
                                         : vec.step(std::span<const float>(&actions.back(), 1));
    REQUIRE(stepped);
    std::vector<double> row(vec.observations().begin(), vec.observations().end());
    row.push_back(vec.rewards()[0]);
    row.push_back(vec.terminated()[0]);
    row.push_back(vec.truncated()[0]);
    for (int i = 0; i < dim; ++i) row.push_back(vec.done(0) ? vec.final_observations()[i] : NAN);
    row.push_back(vec.done(0) ? vec.episode_returns()[0] : NAN);
    row.push_back(vec.done(0) ? vec.episode_lengths()[0] : NAN);
    ours.push_back(std::move(row));
    seen.terminations += vec.terminated()[0];
    seen.truncations += vec.truncated()[0];
    episode += vec.done(0);
  }
  TempDir dir;
  {
    std::ofstream out(dir.file("actions.txt"));
    out.precision(9);
    for (float a : actions) out << a << "\n";
  }
  const CommandResult r = run_command(python_with_numpy() + " " + source_root() + "/tests/env_reference.py " + name +
                                      " " + std::to_string(env_seed(job_seed, 3, 0)) + " " + dir.file("actions.txt"));
  REQUIRE_MESSAGE(r.status == 0, r.output);
  const auto want = parse_lines(r.output);
  REQUIRE(want.size() == ours.size());
  int mismatches = 0;  // the first few say where a trajectory departs; the rest would only repeat it
  for (std::size_t t = 0; t < want.size() && mismatches < 5; ++t) {
    REQUIRE(want[t].size() == ours[t].size());
    for (std::size_t i = 0; i < want[t].size(); ++i)
      if (!close(ours[t][i], want[t][i]) && ++mismatches <= 5)
        FAIL_CHECK(name << " step " << t << " field " << i << ": ours " << ours[t][i] << ", reference " << want[t][i]);
  }
  return seen;
}

}  // namespace

TEST_CASE("envs: CartPole-v1 follows the cart-pole equations through falls, the 500-step limit and resets") {
  const Golden g = check_against_reference("CartPole-v1", 1300, [](const float* o, int episode, std::uint64_t r) {
    return episode % 2 == 0 ? float(r % 2) : float(o[2] + 0.5f * o[3] + 0.01f * o[1] > 0);
  });
  CHECK(g.terminations >= 2);
  CHECK(g.truncations >= 2);
}

TEST_CASE("envs: Acrobot-v1 follows the book dynamics under RK4 through swing-ups, the 500-step limit and resets") {
  const Golden g = check_against_reference("Acrobot-v1", 1300, [](const float* o, int episode, std::uint64_t r) {
    return episode % 2 == 0 ? float(r % 3) : (o[5] > 0 ? 2.0f : 0.0f);
  });
  CHECK(g.terminations >= 1);
  CHECK(g.truncations >= 1);
}

TEST_CASE("envs: MountainCar-v0 follows its equations through the goal, the 200-step limit and resets") {
  const Golden g = check_against_reference("MountainCar-v0", 600, [](const float* o, int episode, std::uint64_t r) {
    return episode % 2 == 0 ? float(r % 3) : (o[1] > 0 ? 2.0f : 0.0f);
  });
  CHECK(g.terminations >= 1);
  CHECK(g.truncations >= 2);
}

TEST_CASE("envs: Pendulum-v1 follows its equations with torques clipped to [-2, 2] and never terminates") {
  const Golden g = check_against_reference("Pendulum-v1", 450, [](const float*, int, std::uint64_t r) {
    return static_cast<float>(r % 7001) / 1000.0f - 3.5f;  // past both bounds, to exercise the clip
  });
  CHECK(g.terminations == 0);
  CHECK(g.truncations == 2);
}
