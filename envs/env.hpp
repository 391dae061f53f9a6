// Environments an actor steps: the interface, the spaces, the seed mixing and the built-in registry.
//
// Threads: an Env and the Rng it draws from belong to one thread (the actor thread that owns the
// VecEnv holding them); nothing here is shared or synchronised. make_env() and require_spaces() may be
// called from any thread.
//
// Numbers follow Gymnasium's classic_control: states are integrated in float64 and handed out as
// float32 observations, so a trajectory matches Gymnasium's equations to float32 rounding.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/env_spec.hpp"

namespace tandem::envs {

using tandem::EnvSpec;  // what an env observes and accepts (common/env_spec.hpp)

// splitmix64 (Steele, Lea, Flood 2014): the whole generator state is one word, every output a full
// 64-bit mix. Used both to derive seeds and as the envs' random stream.
constexpr std::uint64_t splitmix64_mix(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

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

// The seed of env `env_index` of actor `actor_index` in a job seeded `job_seed`:
//   splitmix64_mix(splitmix64_mix(splitmix64_mix(job_seed) + actor_index) + env_index)
// Each step of the chain is a bijection of its input word, so two envs of one actor, or the same env
// index of two actors, never share a seed for a given job seed (tests/env_vec_test.cpp checks it).
constexpr std::uint64_t env_seed(std::uint64_t job_seed, std::uint64_t actor_index, std::uint64_t env_index) {
  return splitmix64_mix(splitmix64_mix(splitmix64_mix(job_seed) + actor_index) + env_index);
}

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

// The built-in envs by Gymnasium id: CartPole-v1, Acrobot-v1, MountainCar-v0, Pendulum-v1, and
// "null" (obs_dim zeros, 2 actions, reward 0, never ends before its time limit: for overhead numbers).
// An unknown name is a UserError naming the choices.
std::unique_ptr<Env> make_env(const std::string& name);

// Throws a UserError naming the env and the mismatch when `got` does not fit what the caller (the
// policy) was built for; fields of `want` left at 0 are not checked.
void require_spaces(const EnvSpec& got, const EnvSpec& want);

}  // namespace tandem::envs
