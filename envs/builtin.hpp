// The built-in envs' factories, for env.cpp's registry (include env.hpp and make_env() instead).
#pragma once

#include <memory>

#include "envs/env.hpp"

namespace tandem::envs {

std::unique_ptr<Env> make_cartpole();
std::unique_ptr<Env> make_mountain_car();
std::unique_ptr<Env> make_pendulum();
std::unique_ptr<Env> make_acrobot();
std::unique_ptr<Env> make_breakout();  // breakout.cpp: images, for convolutional policies
std::unique_ptr<Env> make_null_env(int obs_dim, int max_episode_steps);

}  // namespace tandem::envs
