// Breakout (envs/breakout.cpp): its image observation, the rules of the ball, bricks and paddle, and
// reproducible resets.
#include <doctest/doctest.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "envs/env.hpp"
#include "envs/vec_env.hpp"

using namespace tandem::envs;

namespace {

constexpr int kSize = 10;

struct Frame {
  std::vector<float> obs = std::vector<float>(4 * kSize * kSize);
  float at(int channel, int y, int x) const { return obs[(channel * kSize + y) * kSize + x]; }
  int count(int channel) const {
    return static_cast<int>(std::accumulate(obs.begin() + channel * 100, obs.begin() + (channel + 1) * 100, 0.0f));
  }
  // The one cell of a channel that holds a 1 (paddle, ball, trail).
  std::pair<int, int> where(int channel) const {
    for (int y = 0; y < kSize; ++y)
      for (int x = 0; x < kSize; ++x)
        if (at(channel, y, x) == 1.0f) return {y, x};
    return {-1, -1};
  }
};

}  // namespace

TEST_CASE("breakout: a 4 x 10 x 10 image of paddle, ball, trail and bricks, the ball starting by a wall") {
  auto env = make_env("Breakout");
  const tandem::EnvSpec& spec = env->spec();
  CHECK(spec.obs_dim == 400);
  CHECK(spec.obs_channels == 4);
  CHECK(spec.obs_height == 10);
  CHECK(spec.obs_width() == 10);
  CHECK(spec.image());
  CHECK(spec.num_actions == 3);
  int left = 0;
  for (std::uint64_t seed = 0; seed < 40; ++seed) {
    Rng rng(seed);
    Frame f;
    env->reset(rng, f.obs.data());
    CHECK(f.where(0) == std::pair{9, 4});  // the paddle
    const auto [y, x] = f.where(1);
    CHECK(y == 3);
    CHECK((x == 0 || x == 9));
    left += x == 0;
    CHECK(f.where(2) == f.where(1));  // no trail before the first move
    CHECK(f.count(3) == 30);          // rows 1-3
    for (int c = 0; c < 3; ++c) CHECK(f.count(c) == 1);
  }
  CHECK(left > 5);
  CHECK(left < 35);
}

TEST_CASE("breakout: the ball falls diagonally; past the paddle it ends the episode, by its side it turns back") {
  auto env = make_env("Breakout");
  int ends = 0, saves = 0;
  for (std::uint64_t seed = 0; seed < 10; ++seed) {
    Rng rng(seed);
    Frame f;
    env->reset(rng, f.obs.data());
    const int start_x = f.where(1).second;
    StepOut out;
    for (int step = 1; step <= 6; ++step) {  // the paddle stays at 4 (sticky repeats stay too)
      const auto [y0, x0] = f.where(1);
      out = env->step({0, nullptr}, f.obs.data());
      CHECK(f.where(2) == std::pair{y0, x0});  // the trail is where the ball was
      CHECK(out.reward == 0.0f);
      if (step < 6) CHECK(f.where(1) == std::pair{y0 + 1, x0 + (start_x == 0 ? 1 : -1)});
    }
    if (start_x == 0) {  // it reaches row 9 at column 6, two from the paddle
      CHECK(out.terminated);
      ++ends;
    } else {  // it comes down column 4's way to column 3: the paddle's side sends it back up and right
      CHECK_FALSE(out.terminated);
      CHECK(f.where(1) == std::pair{8, 4});
      (void)env->step({0, nullptr}, f.obs.data());
      CHECK(f.where(1) == std::pair{7, 5});
      ++saves;
    }
  }
  CHECK(ends > 0);
  CHECK(saves > 0);
}

TEST_CASE("breakout: each brick the ball hits goes for +1, and the paddle under the ball sends it back up") {
  auto env = make_env("Breakout");
  Rng rng(3);
  Frame f;
  env->reset(rng, f.obs.data());
  float returned = 0;
  int bounces = 0;
  for (int t = 0; t < 400; ++t) {
    const auto [y0, x0] = f.where(1);
    const int paddle = f.where(0).second, bricks_before = f.count(3);
    const StepOut out = env->step({x0 < paddle ? 1 : x0 > paddle ? 2 : 0, nullptr}, f.obs.data());
    returned += out.reward;
    if (out.terminated) {  // a sticky repeat left the paddle behind
      env->reset(rng, f.obs.data());
      continue;
    }
    const auto [y1, x1] = f.where(1);
    CHECK(std::abs(x1 - x0) <= 1);
    CHECK(std::abs(y1 - y0) <= 1);
    if (f.count(3) != 30) CHECK(out.reward == static_cast<float>(bricks_before - f.count(3)));  // (not a refill)
    bounces += y0 == 8 && y1 == 8;
  }
  CHECK(bounces > 3);
  CHECK(returned >= 10);
}

TEST_CASE("breakout: a paddle that follows the ball breaks far more bricks than one that stays") {
  auto play = [](bool follow) {
    std::vector<std::unique_ptr<Env>> envs;
    envs.reserve(8);
    for (int e = 0; e < 8; ++e) envs.push_back(make_env("Breakout"));
    VecEnv vec(std::move(envs), 7, 0);
    double returns = 0;
    int episodes = 0;
    std::vector<std::int32_t> actions(8);
    for (int t = 0; t < 2000; ++t) {
      for (int e = 0; e < 8; ++e) {
        const float* obs = vec.observations().data() + e * 400;
        int paddle = 0, ball = 0;
        for (int x = 0; x < kSize; ++x) {
          if (obs[90 + x] == 1.0f) paddle = x;
          for (int y = 0; y < kSize; ++y)
            if (obs[100 + y * kSize + x] == 1.0f) ball = x;
        }
        actions[e] = !follow ? 0 : ball < paddle ? 1 : ball > paddle ? 2 : 0;
      }
      REQUIRE(vec.step(std::span<const std::int32_t>(actions)));
      for (int e = 0; e < 8; ++e)
        if (vec.done(e)) returns += vec.episode_returns()[e], ++episodes;
    }
    return episodes > 0 ? returns / episodes : returns;
  };
  const double staying = play(false), following = play(true);
  MESSAGE("mean return: paddle staying " << staying << ", following the ball " << following);
  CHECK(following > 5.0);
  CHECK(following > 2 * staying);
}

TEST_CASE("breakout: the same seed replays the same episode, sticky actions included") {
  auto run = [](std::uint64_t seed) {
    auto env = make_env("Breakout");
    Rng rng(seed);
    Frame f;
    env->reset(rng, f.obs.data());
    std::vector<float> trace = f.obs;
    for (int t = 0; t < 60; ++t) {
      const StepOut out = env->step({t % 3, nullptr}, f.obs.data());
      trace.insert(trace.end(), f.obs.begin(), f.obs.end());
      if (out.terminated) env->reset(rng, f.obs.data());
    }
    return trace;
  };
  CHECK(run(11) == run(11));
  CHECK(run(11) != run(12));
}
