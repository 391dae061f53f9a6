// What an environment observes and accepts. envs/ fills it in; the experience rings and the RL model
// (common/torch/rl_model.hpp) are shaped by it, which is why it lives below both.
#pragma once

#include <string>

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
  bool discrete() const { return num_actions > 0; }
};

}  // namespace tandem
