// CartPole-v1, MountainCar-v0, Pendulum-v1 and the null env. Constants, reset ranges and the order of
// operations are Gymnasium's classic_control ones; the state stays float64 between steps, as there.
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <numbers>

#include "envs/builtin.hpp"

namespace tandem::envs {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// Barto, Sutton & Anderson's cart-pole, explicit Euler with tau = 0.02 s; +1 per step, the
// terminating step included.
constexpr double kThetaLimit = 12 * 2 * std::numbers::pi / 360, kXLimit = 2.4;  // termination

class CartPole final : public Env {
 public:
  const EnvSpec& spec() const override { return spec_; }

  void reset(Rng& rng, float* obs) override {
    for (double& v : s_) v = rng.uniform(-0.05, 0.05);
    observe(obs);
  }

  StepOut step(ActionRef action, float* obs) override {
    constexpr double gravity = 9.8, mass_cart = 1.0, mass_pole = 0.1, total_mass = mass_cart + mass_pole;
    constexpr double half_length = 0.5, pole_mass_length = mass_pole * half_length;
    constexpr double force_mag = 10.0, tau = 0.02;
    auto& [x, x_dot, theta, theta_dot] = s_;
    const double force = action.index == 1 ? force_mag : -force_mag;
    const double cos_t = std::cos(theta), sin_t = std::sin(theta);
    const double temp = (force + pole_mass_length * theta_dot * theta_dot * sin_t) / total_mass;
    const double theta_acc = (gravity * sin_t - cos_t * temp) /
                             (half_length * (4.0 / 3.0 - mass_pole * cos_t * cos_t / total_mass));
    const double x_acc = temp - pole_mass_length * theta_acc * cos_t / total_mass;
    x += tau * x_dot;
    x_dot += tau * x_acc;
    theta += tau * theta_dot;
    theta_dot += tau * theta_acc;
    observe(obs);
    const bool terminated = x < -kXLimit || x > kXLimit || theta < -kThetaLimit || theta > kThetaLimit;
    return {1.0f, terminated, false};
  }

 private:
  void observe(float* obs) const {
    for (int i = 0; i < 4; ++i) obs[i] = static_cast<float>(s_[i]);
  }
  static constexpr auto kX = static_cast<float>(2 * kXLimit), kTheta = static_cast<float>(2 * kThetaLimit);
  EnvSpec spec_{.name = "CartPole-v1",
                .obs_dim = 4,
                .num_actions = 2,
                .max_episode_steps = 500,
                .obs_low = {-kX, -kInf, -kTheta, -kInf},  // Gymnasium writes float32's max for the velocities
                .obs_high = {kX, kInf, kTheta, kInf}};
  std::array<double, 4> s_{};
};

// Moore's mountain car: -1 per step until the car reaches x >= 0.5 with non-negative velocity.
constexpr double kMinPosition = -1.2, kMaxPosition = 0.6, kMaxSpeed = 0.07;

class MountainCar final : public Env {
 public:
  const EnvSpec& spec() const override { return spec_; }

  void reset(Rng& rng, float* obs) override {
    position_ = rng.uniform(-0.6, -0.4);
    velocity_ = 0.0;
    observe(obs);
  }

  StepOut step(ActionRef action, float* obs) override {
    constexpr double goal_position = 0.5;
    constexpr double force = 0.001, gravity = 0.0025;
    velocity_ += (action.index - 1) * force + std::cos(3 * position_) * (-gravity);
    velocity_ = std::clamp(velocity_, -kMaxSpeed, kMaxSpeed);
    position_ += velocity_;
    position_ = std::clamp(position_, kMinPosition, kMaxPosition);
    if (position_ == kMinPosition && velocity_ < 0) velocity_ = 0.0;  // the car hits the left wall
    observe(obs);
    return {-1.0f, position_ >= goal_position && velocity_ >= 0.0, false};
  }

 private:
  void observe(float* obs) const {
    obs[0] = static_cast<float>(position_);
    obs[1] = static_cast<float>(velocity_);
  }
  EnvSpec spec_{.name = "MountainCar-v0",
                .obs_dim = 2,
                .num_actions = 3,
                .max_episode_steps = 200,
                .obs_low = {static_cast<float>(kMinPosition), static_cast<float>(-kMaxSpeed)},
                .obs_high = {static_cast<float>(kMaxPosition), static_cast<float>(kMaxSpeed)}};
  double position_ = 0.0, velocity_ = 0.0;
};

// The inverted pendulum swing-up: torque in [-2, 2], cost theta^2 + 0.1 thdot^2 + 0.001 u^2 with theta
// normalised to [-pi, pi); never terminates, only the time limit ends an episode.
constexpr double kPendulumMaxSpeed = 8.0;

class Pendulum final : public Env {
 public:
  const EnvSpec& spec() const override { return spec_; }

  void reset(Rng& rng, float* obs) override {
    theta_ = rng.uniform(-std::numbers::pi, std::numbers::pi);
    theta_dot_ = rng.uniform(-1.0, 1.0);
    observe(obs);
  }

  StepOut step(ActionRef action, float* obs) override {
    constexpr double g = 10.0, m = 1.0, l = 1.0, dt = 0.05;
    constexpr double pi = std::numbers::pi;
    // The torque is clipped as float32, like the action space's dtype.
    const double u = std::clamp(action.values[0], spec_.action_low, spec_.action_high);
    const double normalised = std::fmod(theta_ + pi, 2 * pi);  // Python's % takes the divisor's sign
    const double angle = (normalised < 0 ? normalised + 2 * pi : normalised) - pi;
    const double cost = angle * angle + 0.1 * theta_dot_ * theta_dot_ + 0.001 * (u * u);
    double new_theta_dot = theta_dot_ + (3 * g / (2 * l) * std::sin(theta_) + 3.0 / (m * l * l) * u) * dt;
    new_theta_dot = std::clamp(new_theta_dot, -kPendulumMaxSpeed, kPendulumMaxSpeed);
    theta_ += new_theta_dot * dt;
    theta_dot_ = new_theta_dot;
    observe(obs);
    return {static_cast<float>(-cost), false, false};
  }

 private:
  void observe(float* obs) const {
    obs[0] = static_cast<float>(std::cos(theta_));
    obs[1] = static_cast<float>(std::sin(theta_));
    obs[2] = static_cast<float>(theta_dot_);
  }
  static constexpr auto kSpeed = static_cast<float>(kPendulumMaxSpeed);
  EnvSpec spec_{.name = "Pendulum-v1",
                .obs_dim = 3,
                .action_dim = 1,
                .action_low = -2.0f,
                .action_high = 2.0f,
                .max_episode_steps = 200,
                .obs_low = {-1, -1, -kSpeed},  // cos, sin of the angle, its velocity
                .obs_high = {1, 1, kSpeed}};
  double theta_ = 0.0, theta_dot_ = 0.0;
};

// Does nothing, as cheaply as possible, so a benchmark measures everything but the env.
class NullEnv final : public Env {
 public:
  NullEnv(int obs_dim, int max_episode_steps) : spec_{"null", obs_dim, 2, 0, 0.0f, 0.0f, max_episode_steps} {}
  const EnvSpec& spec() const override { return spec_; }
  void reset(Rng&, float* obs) override { std::fill_n(obs, spec_.obs_dim, 0.0f); }
  StepOut step(ActionRef, float*) override { return {}; }  // obs keeps the zeros reset() wrote

 private:
  EnvSpec spec_;
};

}  // namespace

std::unique_ptr<Env> make_cartpole() { return std::make_unique<CartPole>(); }
std::unique_ptr<Env> make_mountain_car() { return std::make_unique<MountainCar>(); }
std::unique_ptr<Env> make_pendulum() { return std::make_unique<Pendulum>(); }
std::unique_ptr<Env> make_null_env(int obs_dim, int max_episode_steps) {
  return std::make_unique<NullEnv>(obs_dim, max_episode_steps);
}

}  // namespace tandem::envs
