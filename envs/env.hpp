// Environments an actor steps: the interface, the spaces, the random stream and the built-in registry.
// Seeds derive in envs/seeds.hpp.
//
// Threads: an Env and the Rng it draws from belong to one thread at a time (the actor thread that owns
// the VecEnv holding them, or the VecEnv worker thread that steps its slice: envs/vec_env.hpp); nothing
// here is shared or synchronised. make_env() and require_spaces() may be called from any thread.
//
// Numbers follow Gymnasium's classic_control: states are integrated in float64 and handed out as
// float32 observations, so a trajectory matches Gymnasium's equations to float32 rounding. The MuJoCo
// locomotion tasks (envs/mujoco/, docs/ENVS.md) follow Gymnasium's v5 definitions on bodies of our own.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/env_spec.hpp"
#include "envs/seeds.hpp"

namespace tandem::envs {

using tandem::EnvSpec;  // what an env observes and accepts (common/env_spec.hpp)

// An env's random stream: splitmix64 over one word, seeded env_seed(...) (seeds.hpp) by VecEnv.
class Rng {
 public:
  explicit Rng(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next() {
    state_ += 0x9e3779b97f4a7c15ULL;
    return splitmix64_mix(state_);
  }
  // Uniform in [low, high): the top 53 bits as a double in [0, 1), scaled.
  double uniform(double low, double high) {
    const double unit = static_cast<double>(next() >> 11) * 0x1.0p-53;
    return low + (high - low) * unit;
  }

 private:
  std::uint64_t state_;
};

// An action as the env reads it: `index` for a discrete space, `values` (action_dim floats) for a
// continuous one; the other member is unused.
struct ActionRef {
  std::int32_t index = 0;
  const float* values = nullptr;
};

struct StepOut {
  float reward = 0.0f;
  bool terminated = false;  // the MDP ended: no value after this step
  bool truncated = false;   // cut short by the env itself (the time limit is the VecEnv's)
};

// One environment. reset() and step() write spec().obs_dim floats to `obs`; neither allocates.
// step() after a terminated step without a reset() is the caller's bug (VecEnv never does it).
class Env {
 public:
  virtual ~Env() = default;
  virtual const EnvSpec& spec() const = 0;
  virtual void reset(Rng& rng, float* obs) = 0;
  virtual StepOut step(ActionRef action, float* obs) = 0;
};

// The built-in envs by Gymnasium id: CartPole-v1, Acrobot-v1, MountainCar-v0, Pendulum-v1; the MuJoCo
// tasks by names of our own (Hopper, Walker2d, HalfCheetah, Ant, Humanoid: unversioned, as they are ours and not
// Gymnasium's -v5); and "null" (obs_dim zeros, 2 actions, reward 0, never ends before its time limit:
// for overhead numbers). An unknown name is a UserError naming the choices.
std::unique_ptr<Env> make_env(const std::string& name);

// Throws a UserError naming the env and the mismatch when `got` does not fit what the caller (the
// policy) was built for; fields of `want` left at 0 are not checked.
void require_spaces(const EnvSpec& got, const EnvSpec& want);

}  // namespace tandem::envs
