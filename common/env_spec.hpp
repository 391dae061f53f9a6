// What an environment observes and accepts. envs/ fills it in; the experience rings and the RL model
// (common/torch/rl_model.hpp) are shaped by it, which is why it lives below both.
#pragma once

#include <string>
#include <vector>

namespace tandem {

// A discrete env has num_actions > 0 and action_dim == 0; a continuous env has num_actions == 0,
// action_dim > 0 and every component bounded by [action_low, action_high] (the env clips, as
// Gymnasium's do).
struct EnvSpec {
  std::string name;
  int obs_dim = 0;
  int num_actions = 0;
  int action_dim = 0;
  float action_low = 0.0f;
  float action_high = 0.0f;
  int max_episode_steps = 0;  // the time limit (Gymnasium's TimeLimit); 0 = none
  // An image observation is channels x height x width floats, channel-major (obs_dim in all); a flat
  // one is 1 x 1 x obs_dim. The RL model takes observations in this shape (rl_model.hpp).
  int obs_channels = 1;
  int obs_height = 1;
  // The bounds every observation float stays in (Gymnasium's observation_space: CartPole's are twice
  // its termination limits, so that the terminating observation is inside), obs_dim of each; empty
  // where the env declares none (the MuJoCo tasks, plugins, the null env): unbounded.
  std::vector<float> obs_low = {}, obs_high = {};
  int obs_width() const { return obs_dim / (obs_channels * obs_height); }
  bool image() const { return obs_channels * obs_height > 1; }
  bool discrete() const { return num_actions > 0; }
};

}  // namespace tandem
