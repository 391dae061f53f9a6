// The five locomotion tasks over LocomotionEnv: each says what it observes, when it is healthy and,
// for Ant and Humanoid, what contact costs. Constants are Gymnasium v5's defaults (docs/ENVS.md).
#include "envs/mujoco/tasks.hpp"

#include <algorithm>
#include <cmath>

#include "envs/mujoco/locomotion_env.hpp"

namespace tandem::envs::mujoco {
namespace {

// qpos without the root's x (and, with skip = 2, y), then qvel, clipped to [-clip, clip] when clip > 0.
float* observe_state(const mjModel& m, const mjData& d, int skip, double clip, float* obs) {
  for (int i = skip; i < m.nq; ++i) *obs++ = static_cast<float>(d.qpos[i]);
  for (int i = 0; i < m.nv; ++i) *obs++ = static_cast<float>(clip > 0 ? std::clamp(d.qvel[i], -clip, clip) : d.qvel[i]);
  return obs;
}

int planar_obs_dim(const mjModel& m) { return m.nq - 1 + m.nv; }

float* copy_out(const mjtNum* from, int n, float* obs) {
  for (int i = 0; i < n; ++i) *obs++ = static_cast<float>(from[i]);
  return obs;
}

// Hopper-v5: obs qpos[1:], clip(qvel, -10, 10); healthy while every qpos[2:], qvel is in (-100, 100),
// the height qpos[1] is above 0.7 and the torso's angle qpos[2] is in (-0.2, 0.2).
class Hopper final : public LocomotionEnv {
 public:
  Hopper()
      : LocomotionEnv({.name = "Hopper",
                       .body = Body::hopper,
                       .frame_skip = 4,
                       .healthy_reward = 1.0,
                       .ctrl_cost_weight = 1e-3,
                       .terminate_when_unhealthy = true,
                       .reset_noise = 5e-3,
                       .obs_dim = planar_obs_dim}) {}

 private:
  void observe(float* obs) const override { observe_state(model(), data(), 1, 10.0, obs); }
  bool healthy() const override {
    const mjModel& m = model();
    const mjData& d = data();
    for (int i = 2; i < m.nq; ++i)
      if (!(d.qpos[i] > -100.0 && d.qpos[i] < 100.0)) return false;
    for (int i = 0; i < m.nv; ++i)
      if (!(d.qvel[i] > -100.0 && d.qvel[i] < 100.0)) return false;
    return d.qpos[1] > 0.7 && d.qpos[2] > -0.2 && d.qpos[2] < 0.2;
  }
};

// Walker2d-v5: obs qpos[1:], clip(qvel, -10, 10); healthy while the height qpos[1] is in (0.8, 2.0)
// and the torso's angle qpos[2] in (-1, 1).
class Walker2d final : public LocomotionEnv {
 public:
  Walker2d()
      : LocomotionEnv({.name = "Walker2d",
                       .body = Body::walker2d,
                       .frame_skip = 4,
                       .healthy_reward = 1.0,
                       .ctrl_cost_weight = 1e-3,
                       .terminate_when_unhealthy = true,
                       .reset_noise = 5e-3,
                       .obs_dim = planar_obs_dim}) {}

 private:
  void observe(float* obs) const override { observe_state(model(), data(), 1, 10.0, obs); }
  bool healthy() const override {
    const mjData& d = data();
    return d.qpos[1] > 0.8 && d.qpos[1] < 2.0 && d.qpos[2] > -1.0 && d.qpos[2] < 1.0;
  }
};

// HalfCheetah-v5: obs qpos[1:], qvel; no healthy reward and no termination, only the time limit.
class HalfCheetah final : public LocomotionEnv {
 public:
  HalfCheetah()
      : LocomotionEnv({.name = "HalfCheetah",
                       .body = Body::half_cheetah,
                       .frame_skip = 5,
                       .ctrl_cost_weight = 0.1,
                       .reset_noise = 0.1,
                       .normal_velocity_noise = true,
                       .obs_dim = planar_obs_dim}) {}

 private:
  void observe(float* obs) const override { observe_state(model(), data(), 1, 0.0, obs); }
};

// Ant-v5 with its defaults: obs qpos[2:], qvel, and the external contact forces of every body but the
// world (cfrc_ext[1:], 6 per body) clipped to [-1, 1]; contact cost 5e-4 * |clip(cfrc_ext)|^2;
// forward velocity of the torso's xpos; healthy while the state is finite and the torso's height
// qpos[2] is in [0.2, 1.0]. cfrc_ext is computed after the frames by mj_rnePostConstraint, as
// Gymnasium's MujocoEnv does (mj_step leaves it unset in a model without force sensors).
class Ant final : public LocomotionEnv {
 public:
  Ant()
      : LocomotionEnv({.name = "Ant",
                       .body = Body::ant,
                       .frame_skip = 5,
                       .healthy_reward = 1.0,
                       .ctrl_cost_weight = 0.5,
                       .terminate_when_unhealthy = true,
                       .reset_noise = 0.1,
                       .normal_velocity_noise = true,
                       .obs_dim = ant_obs_dim}) {}

 private:
  static constexpr int kTorso = 1;
  static constexpr double kContactCostWeight = 5e-4, kContactClip = 1.0;
  static int ant_obs_dim(const mjModel& m) { return m.nq - 2 + m.nv + 6 * (m.nbody - 1); }

  void observe(float* obs) const override {
    const mjModel& m = model();
    obs = observe_state(m, data(), 2, 0.0, obs);
    const mjtNum* forces = data().cfrc_ext;
    for (int i = 6; i < 6 * m.nbody; ++i)
      *obs++ = static_cast<float>(std::clamp(forces[i], -kContactClip, kContactClip));
  }
  bool healthy() const override {
    const mjModel& m = model();
    const mjData& d = data();
    for (int i = 0; i < m.nq; ++i)
      if (!std::isfinite(d.qpos[i])) return false;
    for (int i = 0; i < m.nv; ++i)
      if (!std::isfinite(d.qvel[i])) return false;
    return d.qpos[2] >= 0.2 && d.qpos[2] <= 1.0;
  }
  double forward_position() const override { return data().xpos[3 * kTorso]; }
  void after_physics() override { mj_rnePostConstraint(&model(), &mutable_data()); }
  double extra_cost() const override {
    const mjModel& m = model();
    double sum = 0.0;
    for (int i = 0; i < 6 * m.nbody; ++i) {
      const double f = std::clamp(data().cfrc_ext[i], -kContactClip, kContactClip);
      sum += f * f;
    }
    return kContactCostWeight * sum;
  }
};

// Humanoid-v5 with its defaults: obs qpos[2:] (22), qvel (23), then of every body but the world its
// com-based inertia cinert[1:] (13 x 10), com-based velocity cvel[1:] (13 x 6), the actuator forces
// past the free joint's 6 dofs qfrc_actuator[6:] (17) and the external contact forces cfrc_ext[1:]
// (13 x 6), none clipped: 348 in all. Forward velocity of the centre of mass (xipos weighted by body
// mass); contact cost min(5e-7 * |cfrc_ext|^2, 10); healthy while the torso's height qpos[2] is in
// (1, 2), strictly (v5's code; its docstring says closed). cfrc_ext by mj_rnePostConstraint, as Ant.
class Humanoid final : public LocomotionEnv {
 public:
  Humanoid()
      : LocomotionEnv({.name = "Humanoid",
                       .body = Body::humanoid,
                       .frame_skip = 5,
                       .forward_weight = 1.25,
                       .healthy_reward = 5.0,
                       .ctrl_cost_weight = 0.1,
                       .terminate_when_unhealthy = true,
                       .reset_noise = 1e-2,
                       .obs_dim = humanoid_obs_dim}) {}

 private:
  static constexpr int kRootDofs = 6;
  static constexpr double kContactCostWeight = 5e-7, kContactCostMax = 10.0;
  static int humanoid_obs_dim(const mjModel& m) {
    return m.nq - 2 + m.nv + (10 + 6 + 6) * (m.nbody - 1) + (m.nv - kRootDofs);
  }

  void observe(float* obs) const override {
    const mjModel& m = model();
    const mjData& d = data();
    const int bodies = m.nbody - 1;  // the world's rows (body 0) are always 0: v5 leaves them out
    obs = observe_state(m, d, 2, 0.0, obs);
    obs = copy_out(d.cinert + 10, 10 * bodies, obs);
    obs = copy_out(d.cvel + 6, 6 * bodies, obs);
    obs = copy_out(d.qfrc_actuator + kRootDofs, m.nv - kRootDofs, obs);
    copy_out(d.cfrc_ext + 6, 6 * bodies, obs);
  }
  bool healthy() const override { return data().qpos[2] > 1.0 && data().qpos[2] < 2.0; }
  double forward_position() const override {
    const mjModel& m = model();
    double weighted = 0.0, mass = 0.0;
    for (int b = 0; b < m.nbody; ++b) {
      weighted += m.body_mass[b] * data().xipos[3 * b];
      mass += m.body_mass[b];
    }
    return weighted / mass;
  }
  void after_physics() override { mj_rnePostConstraint(&model(), &mutable_data()); }
  double extra_cost() const override {
    const mjModel& m = model();
    double sum = 0.0;
    for (int i = 0; i < 6 * m.nbody; ++i) sum += data().cfrc_ext[i] * data().cfrc_ext[i];
    return std::min(kContactCostWeight * sum, kContactCostMax);  // a NaN stays NaN, as np.clip's
  }
};

}  // namespace

std::unique_ptr<Env> make_task(std::string_view name) {
  if (name == "Hopper") return std::make_unique<Hopper>();
  if (name == "Walker2d") return std::make_unique<Walker2d>();
  if (name == "HalfCheetah") return std::make_unique<HalfCheetah>();
  if (name == "Ant") return std::make_unique<Ant>();
  if (name == "Humanoid") return std::make_unique<Humanoid>();
  return nullptr;
}

}  // namespace tandem::envs::mujoco
