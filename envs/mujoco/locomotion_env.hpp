// LocomotionEnv: what the MuJoCo locomotion tasks share, after Gymnasium v5's MujocoEnv and its
// locomotion envs (docs/ENVS.md has every definition and where ours differ).
//
//  action   action_dim floats, each clipped to [-1, 1] (NaN reads as -1) and mapped onto its
//           actuator's ctrlrange as centre + half-width * a (the identity for the bodies whose
//           ctrlrange is [-1, 1]; Humanoid's [-0.4, 0.4] makes it 0.4 * a); the policy always sees
//           [-1, 1] (EnvSpec action_low/high).
//  step     ctrl set once, then frame_skip mj_step calls; the task's after_physics() hook; then
//           reward = forward_weight * dx/dt + healthy_reward * healthy - ctrl_cost_weight * |ctrl|^2
//                    - extra_cost()
//           with ctrl the control written (v5 squares data.ctrl for Humanoid, the action for the
//           others: the same thing where ctrlrange is [-1, 1]), dx the task's forward position
//           (forward_position()) across the step and dt = timestep * frame_skip;
//           terminated = terminate_when_unhealthy && !healthy.
//  reset    mj_resetData, then qpos = qpos0 + U(-noise, noise) per coordinate (drawn first, in
//           order), qvel = U(-noise, noise) or noise * N(0, 1) per coordinate (drawn next), from
//           the env's Rng; then mj_forward.
//
// Threads: one at a time (env.hpp). The model is shared read-only with the task's other envs; the
// mjData is this env's own. step() and reset() allocate nothing.
#pragma once

#include <vector>

#include "envs/env.hpp"
#include "envs/mujoco/model.hpp"

namespace tandem::envs::mujoco {

struct TaskConfig {
  const char* name = "";
  Body body = Body::hopper;
  int frame_skip = 1;
  double forward_weight = 1.0;
  double healthy_reward = 0.0;
  double ctrl_cost_weight = 0.0;
  bool terminate_when_unhealthy = false;
  double reset_noise = 0.0;
  bool normal_velocity_noise = false;  // qvel noise: noise * N(0, 1) rather than U(-noise, noise)
  int max_episode_steps = 1000;
  int (*obs_dim)(const mjModel&) = nullptr;  // what the task's observe() writes for this model
};

class LocomotionEnv : public Env {
 public:
  const EnvSpec& spec() const final { return spec_; }
  void reset(Rng& rng, float* obs) final;
  StepOut step(ActionRef action, float* obs) final;

  const mjModel& model() const { return *model_; }
  const mjData& data() const { return *data_; }
  int frame_skip() const { return config_.frame_skip; }
  // For a loop that drives the physics itself (tandem-bench mujoco's bare loop): the env's mjData,
  // the work each step does after the frames, and the task's health test.
  mjData& mutable_data() { return *data_; }
  virtual void after_physics() {}
  virtual bool healthy() const { return true; }

 protected:
  explicit LocomotionEnv(const TaskConfig& config);
  virtual void observe(float* obs) const = 0;
  virtual double forward_position() const { return data_->qpos[0]; }
  virtual double extra_cost() const { return 0.0; }

 private:
  TaskConfig config_;
  ModelPtr model_;
  DataPtr data_;
  EnvSpec spec_;
  double dt_ = 0.0;
  std::vector<double> ctrl_centre_, ctrl_half_;
};

// A standard normal draw: Box-Muller over two uniforms of the Rng (the cosine branch only).
double standard_normal(Rng& rng);

}  // namespace tandem::envs::mujoco
