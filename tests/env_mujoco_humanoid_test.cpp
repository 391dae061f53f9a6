// Humanoid (envs/mujoco/tasks.cpp), Tandem's Humanoid-v5: where each block of its 348 observations
// lies, the reset's noise, when it terminates, and each term of its reward against numbers worked out
// here from the model and the state. What every task shares (spaces, seeds, clipping, threads) is in
// tests/env_mujoco_test.cpp, whose task table includes Humanoid.
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "envs/mujoco/locomotion_env.hpp"
#include "envs/vec_env.hpp"
#include "tests/harness.hpp"

using namespace tandem::envs;

namespace {

constexpr std::size_t kObs = 348;
constexpr int kActions = 17;
constexpr double kDt = 5 * 0.003;  // frame_skip x timestep

struct Humanoid {
  std::unique_ptr<Env> env = make_env("Humanoid");
  mujoco::LocomotionEnv& body = dynamic_cast<mujoco::LocomotionEnv&>(*env);
  std::vector<float> obs = std::vector<float>(kObs);

  const mjModel& m() const { return body.model(); }
  mjData& d() { return body.mutable_data(); }
  void reset(std::uint64_t seed) {
    Rng rng(seed);
    env->reset(rng, obs.data());
  }
  StepOut step(float a) {
    const std::vector<float> action(kActions, a);
    return step(action);
  }
  StepOut step(const std::vector<float>& action) { return env->step(ActionRef{0, action.data()}, obs.data()); }
  // Standing still at qpos0 with the torso at `height` and the root moving along x at `vx`. The feet
  // are 0.107 m above the ground at 1.4 m: above 1.3 m nothing outside the body pushes it along x.
  // `lying` turns the body a quarter turn about y, its length horizontal; `vz` sends it down or up.
  void place(double height, double vx, bool lying = false, double vz = 0.0) {
    mj_resetData(&m(), &d());
    d().qpos[2] = height;
    if (lying) {
      d().qpos[3] = std::sqrt(0.5);
      d().qpos[5] = std::sqrt(0.5);
    }
    d().qvel[0] = vx;
    d().qvel[2] = vz;
    mj_forward(&m(), &d());
  }
  // Steps `a` until a contact force shows in the observation (the feet landing), at most `steps`.
  bool step_until_contact(float a, int steps) {
    for (int t = 0; t < steps; ++t) {
      if (step(a).terminated) return false;
      for (std::size_t i = 270; i < kObs; ++i)
        if (obs[i] != 0.0f) return true;
    }
    return false;
  }
  double centre_of_mass_x() {
    double weighted = 0.0, mass = 0.0;
    for (int b = 0; b < m().nbody; ++b) {
      weighted += m().body_mass[b] * d().xipos[3 * b];
      mass += m().body_mass[b];
    }
    return weighted / mass;
  }
  double contact_square() {
    double sum = 0.0;
    for (int i = 0; i < 6 * m().nbody; ++i) sum += d().cfrc_ext[i] * d().cfrc_ext[i];
    return sum;
  }
};

// obs[at, at + n) is `from` as floats.
bool block_is(const std::vector<float>& obs, std::size_t at, const mjtNum* from, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i)
    if (obs[at + i] != static_cast<float>(from[i])) return false;
  return true;
}

// a[0, n) and b[0, n) hold the same bits (floats or doubles).
template <class T>
bool same_bits(const T* a, const T* b, std::size_t n) {
  using Bits = std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>;
  for (std::size_t i = 0; i < n; ++i)
    if (std::bit_cast<Bits>(a[i]) != std::bit_cast<Bits>(b[i])) return false;
  return true;
}

}  // namespace

TEST_CASE("mujoco: Humanoid observes qpos[2:], qvel, cinert, cvel, qfrc_actuator[6:], cfrc_ext, 348 in all") {
  Humanoid h;
  CHECK(h.env->spec().obs_dim == static_cast<int>(kObs));
  CHECK(h.env->spec().action_dim == kActions);
  CHECK(h.m().nq == 24);
  CHECK(h.m().nv == 23);
  CHECK(h.m().nbody == 14);
  CHECK(h.m().nu == kActions);
  for (int i = 0; i < h.m().nu; ++i) {
    CHECK(h.m().actuator_ctrlrange[2 * i] == -0.4);
    CHECK(h.m().actuator_ctrlrange[2 * i + 1] == 0.4);
  }
  h.reset(3);
  REQUIRE(h.step_until_contact(0.3f, 30));  // mj_rnePostConstraint filled cfrc_ext
  const mjData& d = h.d();
  CHECK(h.obs[0] == static_cast<float>(d.qpos[2]));  // the torso's height first: x and y are left out
  CHECK(block_is(h.obs, 0, d.qpos + 2, 22));
  CHECK(block_is(h.obs, 22, d.qvel, 23));
  CHECK(block_is(h.obs, 45, d.cinert + 10, 130));
  CHECK(block_is(h.obs, 175, d.cvel + 6, 78));
  CHECK(block_is(h.obs, 253, d.qfrc_actuator + 6, 17));
  CHECK(block_is(h.obs, 270, d.cfrc_ext + 6, 78));
  // cinert's 10th number is the body's mass: the block starts at the torso (body 1), not the world.
  CHECK(h.obs[45 + 9] == static_cast<float>(h.m().body_mass[1]));
  CHECK(h.obs[45 + 10 + 9] == static_cast<float>(h.m().body_mass[2]));
}

TEST_CASE("mujoco: a Humanoid reset lands within 0.01 of qpos0 and of rest, in one state per seed") {
  Humanoid h;
  h.reset(21);
  const std::vector<float> first = h.obs;
  double largest = 0.0;
  std::vector<double> qpos(h.d().qpos, h.d().qpos + h.m().nq), qvel(h.d().qvel, h.d().qvel + h.m().nv);
  for (int i = 0; i < h.m().nq; ++i) {
    CHECK(std::abs(qpos[i] - h.m().qpos0[i]) <= 0.01);
    largest = std::max(largest, std::abs(qpos[i] - h.m().qpos0[i]));
  }
  for (int i = 0; i < h.m().nv; ++i) {
    CHECK(std::abs(qvel[i]) <= 0.01);
    largest = std::max(largest, std::abs(qvel[i]));
  }
  CHECK(largest > 0.005);  // 47 draws of U(-0.01, 0.01): noise, not zeros
  CHECK(std::abs(h.obs[0] - 1.4f) <= 0.01f);
  for (std::size_t i = 270; i < kObs; ++i) CHECK(h.obs[i] == 0.0f);  // no forces before a step
  for (int t = 0; t < 10; ++t) (void)h.step(-0.5f);
  h.reset(21);
  CHECK(same_bits(first.data(), h.obs.data(), kObs));
  CHECK(same_bits(qpos.data(), h.d().qpos, qpos.size()));
  CHECK(same_bits(qvel.data(), h.d().qvel, qvel.size()));
  h.reset(22);
  CHECK(first != h.obs);
}

TEST_CASE("mujoco: Humanoid's torso leaving (1, 2) m ends the episode as terminated, not truncated") {
  VecEnv vec = [] {
    std::vector<std::unique_ptr<Env>> one;
    one.push_back(make_env("Humanoid"));
    return VecEnv(std::move(one), 4, 0, 0, 1);
  }();
  const std::vector<float> still(kActions, 0.0f);
  float height = vec.observations()[0];
  int t = 0;
  while (!vec.done(0) && t < 1000) {
    CHECK(height > 1.0f);
    REQUIRE(vec.step(std::span<const float>(still)));
    height = vec.done(0) ? vec.final_observations()[0] : vec.observations()[0];
    ++t;
  }
  CHECK(vec.terminated()[0] == 1);
  CHECK(vec.truncated()[0] == 0);
  CHECK(t < 200);
  CHECK(height <= 1.0f);
  CHECK(vec.episode_lengths()[0] == t);
  Humanoid h;
  h.reset(1);
  h.place(2.2, 0.0);  // above the range's top, falling through it too slowly to get back in one step
  const StepOut high = h.step(0.0f);
  CHECK(high.terminated);
  CHECK_FALSE(high.truncated);
  CHECK(high.reward == doctest::Approx(0.0).epsilon(1e-6));  // no healthy reward, nothing else either
  h.place(0.6, 0.0, true);                                   // lying in the air, below the range
  const StepOut low = h.step(0.0f);
  CHECK(low.terminated);
  CHECK(low.reward == doctest::Approx(0.0).epsilon(1e-6));
}

TEST_CASE("mujoco: Humanoid follows one trajectory bit for bit from one seed and one action sequence") {
  Humanoid a, b;
  a.reset(8);
  b.reset(8);
  std::vector<float> action(kActions);
  std::uint64_t state = 5;
  for (int t = 0; t < 150; ++t) {
    for (float& x : action) {
      state = state * 6364136223846793005ULL + 1442695040888963407ULL;
      x = static_cast<float>(static_cast<double>(state >> 11) * 0x1.0p-53 * 2.0 - 1.0);
    }
    const StepOut sa = a.step(action), sb = b.step(action);
    REQUIRE(same_bits(a.obs.data(), b.obs.data(), kObs));
    REQUIRE(same_bits(&sa.reward, &sb.reward, 1));
    REQUIRE(sa.terminated == sb.terminated);
    if (sa.terminated) {
      a.reset(9 + t);
      b.reset(9 + t);
    }
  }
  CHECK(same_bits(a.d().qpos, b.d().qpos, 24));
}

TEST_CASE("mujoco: Humanoid's forward reward is 1.25 x its centre of mass's x velocity over 0.015 s") {
  CHECK(Humanoid().m().opt.timestep == 0.003);
  Humanoid h;
  h.reset(1);
  h.place(1.6, 2.0);  // in the air: only gravity acts from outside, so the centre of mass keeps vx = 2
  for (int t = 0; t < 3; ++t) {
    const double before = h.centre_of_mass_x();
    const StepOut out = h.step(0.0f);
    CHECK((h.centre_of_mass_x() - before) / kDt == doctest::Approx(2.0).epsilon(1e-6));
    CHECK(out.reward == doctest::Approx(5.0 + 1.25 * 2.0).epsilon(1e-6));
    CHECK(h.contact_square() == 0.0);
  }
}

TEST_CASE("mujoco: Humanoid's control cost is 0.1 |ctrl|^2, the clipped action scaled by 0.4 onto ctrlrange") {
  Humanoid h;
  h.reset(1);
  h.place(1.6, 0.0);  // at rest in the air: the motors move the limbs, not the centre of mass
  std::vector<float> action(kActions, 0.5f);
  action[3] = -3.0f;  // clipped to -1: the control -0.4
  action[9] = 1.0f;
  const StepOut out = h.step(action);
  REQUIRE_FALSE(out.terminated);
  for (int i = 0; i < kActions; ++i)
    CHECK(h.d().ctrl[i] == 0.4 * std::clamp(static_cast<double>(action[i]), -1.0, 1.0));
  const double ctrl_cost = 0.1 * (15 * 0.2 * 0.2 + 2 * 0.4 * 0.4);
  CHECK(out.reward == doctest::Approx(5.0 - ctrl_cost).epsilon(1e-6));
}

TEST_CASE("mujoco: Humanoid earns 5 a healthy step and pays 5e-7 |cfrc_ext|^2 for contacts, at most 10") {
  Humanoid h;
  h.reset(1);
  h.place(1.6, 0.0);
  CHECK(h.step(0.0f).reward == doctest::Approx(5.0).epsilon(1e-6));
  for (const double vz : {0.0, -10.0}) {  // dropped from 1.4 m: landing; thrown down at 10 m/s: a crash
    CAPTURE(vz);
    h.place(1.4, 0.0, false, vz);
    if (vz == 0.0) REQUIRE(h.step_until_contact(0.0f, 30));
    const double before = h.centre_of_mass_x();
    const StepOut out = h.step(0.0f);
    const double forward = 1.25 * (h.centre_of_mass_x() - before) / kDt;
    const double raw = 5e-7 * h.contact_square();
    CHECK(raw > 0.0);
    CHECK((raw > 10.0) == (vz < 0.0));  // the crash's forces are large enough for the cap
    const double healthy = h.d().qpos[2] > 1.0 && h.d().qpos[2] < 2.0 ? 5.0 : 0.0;
    CHECK(out.reward == doctest::Approx(forward + healthy - std::min(raw, 10.0)).epsilon(1e-5));
  }
}
