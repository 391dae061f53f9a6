// The MuJoCo locomotion tasks by name: Hopper, Walker2d, HalfCheetah, Ant and Humanoid, Tandem's
// versions of Gymnasium's Hopper-v5, Walker2d-v5, HalfCheetah-v5, Ant-v5 and Humanoid-v5
// (docs/ENVS.md). Any thread.
#pragma once

#include <memory>
#include <string_view>

#include "envs/env.hpp"

namespace tandem::envs::mujoco {

// nullptr when `name` is not one of the tasks.
std::unique_ptr<Env> make_task(std::string_view name);

}  // namespace tandem::envs::mujoco
