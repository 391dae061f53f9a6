// Acrobot-v1: Sutton's two-link underactuated pendulum with the "book" dynamics (Sutton & Barto 1998,
// which adds the m2 l1 lc2 dtheta1^2 sin(theta2) term the NIPS paper leaves out), one fourth-order
// Runge-Kutta step of dt = 0.2 s per action, angles wrapped to [-pi, pi], velocities clipped.
// Gymnasium draws the reset state as float32 and integrates in float64 from then on; so does this.
#include <algorithm>
#include <array>
#include <cmath>
#include <numbers>

#include "envs/builtin.hpp"

namespace tandem::envs {
namespace {

using State = std::array<double, 4>;  // theta1, theta2, dtheta1, dtheta2

constexpr double pi = std::numbers::pi;
constexpr double kMaxVel1 = 4 * pi, kMaxVel2 = 9 * pi;  // the velocities' clip, and their observation bounds

// d/dt of the state under `torque`.
State derivatives(const State& s, double torque) {
  constexpr double m1 = 1.0, m2 = 1.0, l1 = 1.0, lc1 = 0.5, lc2 = 0.5, i1 = 1.0, i2 = 1.0, g = 9.8;
  const auto [theta1, theta2, dtheta1, dtheta2] = s;
  const double d1 = m1 * lc1 * lc1 + m2 * (l1 * l1 + lc2 * lc2 + 2 * l1 * lc2 * std::cos(theta2)) + i1 + i2;
  const double d2 = m2 * (lc2 * lc2 + l1 * lc2 * std::cos(theta2)) + i2;
  const double phi2 = m2 * lc2 * g * std::cos(theta1 + theta2 - pi / 2.0);
  const double phi1 = -m2 * l1 * lc2 * dtheta2 * dtheta2 * std::sin(theta2) -
                      2 * m2 * l1 * lc2 * dtheta2 * dtheta1 * std::sin(theta2) +
                      (m1 * lc1 + m2 * l1) * g * std::cos(theta1 - pi / 2) + phi2;
  const double ddtheta2 = (torque + d2 / d1 * phi1 - m2 * l1 * lc2 * dtheta1 * dtheta1 * std::sin(theta2) - phi2) /
                          (m2 * lc2 * lc2 + i2 - d2 * d2 / d1);
  const double ddtheta1 = -(d2 * ddtheta2 + phi1) / d1;
  return {dtheta1, dtheta2, ddtheta1, ddtheta2};
}

State axpy(const State& y, double a, const State& k) {
  return {y[0] + a * k[0], y[1] + a * k[1], y[2] + a * k[2], y[3] + a * k[3]};
}

// Subtracts or adds whole turns until x lies in [low, high], as Gymnasium's wrap() does.
double wrap(double x, double low, double high) {
  const double span = high - low;
  while (x > high) x -= span;
  while (x < low) x += span;
  return x;
}

class Acrobot final : public Env {
 public:
  const EnvSpec& spec() const override { return spec_; }

  void reset(Rng& rng, float* obs) override {
    for (double& v : s_) v = static_cast<float>(rng.uniform(-0.1, 0.1));
    observe(obs);
  }

  StepOut step(ActionRef action, float* obs) override {
    constexpr double dt = 0.2;
    const double torque = static_cast<double>(action.index - 1);  // actions 0, 1, 2 -> -1, 0, +1
    const State k1 = derivatives(s_, torque);
    const State k2 = derivatives(axpy(s_, dt / 2, k1), torque);
    const State k3 = derivatives(axpy(s_, dt / 2, k2), torque);
    const State k4 = derivatives(axpy(s_, dt, k3), torque);
    State next;
    for (int i = 0; i < 4; ++i) next[i] = s_[i] + dt / 6.0 * (k1[i] + 2 * k2[i] + 2 * k3[i] + k4[i]);
    next[0] = wrap(next[0], -pi, pi);
    next[1] = wrap(next[1], -pi, pi);
    next[2] = std::clamp(next[2], -kMaxVel1, kMaxVel1);
    next[3] = std::clamp(next[3], -kMaxVel2, kMaxVel2);
    s_ = next;
    observe(obs);
    // The tip is more than one link length above the pivot.
    const bool terminated = -std::cos(s_[0]) - std::cos(s_[1] + s_[0]) > 1.0;
    return {terminated ? 0.0f : -1.0f, terminated, false};
  }

 private:
  void observe(float* obs) const {
    obs[0] = static_cast<float>(std::cos(s_[0]));
    obs[1] = static_cast<float>(std::sin(s_[0]));
    obs[2] = static_cast<float>(std::cos(s_[1]));
    obs[3] = static_cast<float>(std::sin(s_[1]));
    obs[4] = static_cast<float>(s_[2]);
    obs[5] = static_cast<float>(s_[3]);
  }
  static constexpr auto kV1 = static_cast<float>(kMaxVel1), kV2 = static_cast<float>(kMaxVel2);
  EnvSpec spec_{.name = "Acrobot-v1",
                .obs_dim = 6,
                .num_actions = 3,
                .max_episode_steps = 500,
                .obs_low = {-1, -1, -1, -1, -kV1, -kV2},  // cos and sin of both angles, both velocities
                .obs_high = {1, 1, 1, 1, kV1, kV2}};
  State s_{};
};

}  // namespace

std::unique_ptr<Env> make_acrobot() { return std::make_unique<Acrobot>(); }

}  // namespace tandem::envs
