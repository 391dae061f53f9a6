#include "envs/mujoco/locomotion_env.hpp"

#include <cmath>
#include <numbers>

namespace tandem::envs::mujoco {

double standard_normal(Rng& rng) {
  const double u1 = 1.0 - rng.uniform(0.0, 1.0);  // (0, 1]: the log stays finite
  const double u2 = rng.uniform(0.0, 1.0);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

LocomotionEnv::LocomotionEnv(const TaskConfig& config)
    : config_(config), model_(shared_model(config.body)), data_(make_data(model_)) {
  const mjModel& m = *model_;
  spec_ = EnvSpec{config.name, config.obs_dim(m), 0, m.nu, -1.0f, 1.0f, config.max_episode_steps};
  dt_ = m.opt.timestep * config.frame_skip;
  ctrl_centre_.assign(static_cast<std::size_t>(m.nu), 0.0);
  ctrl_half_.assign(static_cast<std::size_t>(m.nu), 1.0);
  for (int i = 0; i < m.nu; ++i) {
    if (!m.actuator_ctrllimited[i]) continue;
    const double low = m.actuator_ctrlrange[2 * i], high = m.actuator_ctrlrange[2 * i + 1];
    ctrl_centre_[static_cast<std::size_t>(i)] = 0.5 * (low + high);
    ctrl_half_[static_cast<std::size_t>(i)] = 0.5 * (high - low);
  }
}

void LocomotionEnv::reset(Rng& rng, float* obs) {
  const mjModel& m = *model_;
  mjData& d = *data_;
  mj_resetData(&m, &d);
  const double noise = config_.reset_noise;
  for (int i = 0; i < m.nq; ++i) d.qpos[i] = m.qpos0[i] + rng.uniform(-noise, noise);
  for (int i = 0; i < m.nv; ++i)
    d.qvel[i] = config_.normal_velocity_noise ? noise * standard_normal(rng) : rng.uniform(-noise, noise);
  mj_forward(&m, &d);
  observe(obs);
}

StepOut LocomotionEnv::step(ActionRef action, float* obs) {
  const mjModel& m = *model_;
  mjData& d = *data_;
  double ctrl_square = 0.0;
  for (int i = 0; i < m.nu; ++i) {
    const double a = std::fmin(std::fmax(static_cast<double>(action.values[i]), -1.0), 1.0);
    d.ctrl[i] = ctrl_centre_[static_cast<std::size_t>(i)] + ctrl_half_[static_cast<std::size_t>(i)] * a;
    ctrl_square += d.ctrl[i] * d.ctrl[i];
  }
  const double before = forward_position();
  for (int k = 0; k < config_.frame_skip; ++k) mj_step(&m, &d);
  after_physics();
  const double velocity = (forward_position() - before) / dt_;
  const bool is_healthy = healthy();
  const double reward = config_.forward_weight * velocity + (is_healthy ? config_.healthy_reward : 0.0) -
                        config_.ctrl_cost_weight * ctrl_square - extra_cost();
  observe(obs);
  return {static_cast<float>(reward), config_.terminate_when_unhealthy && !is_healthy, false};
}

}  // namespace tandem::envs::mujoco
