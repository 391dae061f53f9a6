// The built-in env registry and the space check shared by built-in and plugin envs.
#include "envs/env.hpp"

#include "envs/builtin.hpp"
#include "envs/mujoco/tasks.hpp"
#include "common/error.hpp"

namespace tandem::envs {

std::unique_ptr<Env> make_env(const std::string& name) {
  if (name == "CartPole-v1") return make_cartpole();
  if (name == "Acrobot-v1") return make_acrobot();
  if (name == "MountainCar-v0") return make_mountain_car();
  if (name == "Pendulum-v1") return make_pendulum();
  if (name == "Breakout") return make_breakout();
  if (name == "null") return make_null_env(4, 1000);
  if (auto task = mujoco::make_task(name)) return task;
  fail(
      "unknown env '{}': choose CartPole-v1, Acrobot-v1, MountainCar-v0, Pendulum-v1, Hopper, Walker2d, "
      "HalfCheetah, Ant, Humanoid, Breakout or null, or load your own with env.plugin",
      name);
}

void require_spaces(const EnvSpec& got, const EnvSpec& want) {
  if (want.obs_dim != 0 && got.obs_dim != want.obs_dim)
    fail("env '{}' observes {} floats but the policy expects {}: set the model's input size to {}", got.name,
         got.obs_dim, want.obs_dim, got.obs_dim);
  if (want.obs_dim != 0 && (got.obs_channels != want.obs_channels || got.obs_height != want.obs_height))
    fail("env '{}' observes {} x {} x {} but the policy expects {} x {} x {}: envs of one job share one shape",
         got.name, got.obs_channels, got.obs_height, got.obs_width(), want.obs_channels, want.obs_height,
         want.obs_width());
  if (want.num_actions != 0 && got.num_actions != want.num_actions)
    fail("env '{}' has {} but the policy expects {} discrete actions: set the model's output size to match", got.name,
         got.discrete() ? fmt::format("{} discrete actions", got.num_actions) : "continuous actions", want.num_actions);
  if (want.action_dim != 0 && got.action_dim != want.action_dim)
    fail(
        "env '{}' has {} but the policy expects {}-dimensional continuous actions: set the model's action "
        "size to match",
        got.name,
        got.discrete() ? fmt::format("{} discrete actions", got.num_actions)
                       : fmt::format("{}-dimensional actions", got.action_dim),
        want.action_dim);
}

}  // namespace tandem::envs
