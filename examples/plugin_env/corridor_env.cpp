// An example env plugin: a corridor of `length` cells (config "length=N", default 10). The walker
// starts in a random cell of the middle half and moves left (action 0) or right (action 1); reaching
// the right end pays +1 and ends the episode, every other step costs 0.01. Observation: the walker's
// position scaled to [0, 1] and the fraction of the episode's step budget used.
//
// Build your own the same way: implement every function of envs/tandem_env.h with C linkage,
// build a shared library, and point `env.plugin` at it.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <new>

#include "envs/tandem_env.h"

struct tandem_env {
  int length = 10;
  int position = 0;
  int steps = 0;
  std::uint64_t rng = 0;
};

namespace {

constexpr int kMaxSteps = 100;

std::uint64_t next_random(std::uint64_t& state) {  // splitmix64
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

void observe(const tandem_env* env, float* obs) {
  obs[0] = static_cast<float>(env->position) / static_cast<float>(env->length - 1);
  obs[1] = static_cast<float>(env->steps) / static_cast<float>(kMaxSteps);
}

}  // namespace

extern "C" {

uint32_t tandem_env_abi_version(void) { return TANDEM_ENV_ABI_VERSION; }

tandem_env* tandem_env_create(const char* config, char* error, size_t error_size) {
  int length = 10;
  if (config != nullptr && config[0] != '\0' && (std::sscanf(config, "length=%d", &length) != 1 || length < 4)) {
    std::snprintf(error, error_size, "config must read \"length=N\" with N >= 4, got \"%s\"", config);
    return nullptr;
  }
  tandem_env* env = new (std::nothrow) tandem_env;
  if (env == nullptr) {
    std::snprintf(error, error_size, "out of memory");
    return nullptr;
  }
  env->length = length;
  return env;
}

void tandem_env_destroy(tandem_env* env) { delete env; }

void tandem_env_spaces_of(const tandem_env*, tandem_env_spaces* spaces) {
  *spaces = tandem_env_spaces{2, 2, 0, 0.0f, 0.0f, kMaxSteps};
}

void tandem_env_reset(tandem_env* env, uint64_t seed, float* obs) {
  env->rng = seed;
  const int quarter = env->length / 4;
  env->position = quarter + static_cast<int>(next_random(env->rng) % static_cast<std::uint64_t>(env->length / 2));
  env->steps = 0;
  observe(env, obs);
}

void tandem_env_step(tandem_env* env, const void* action, float* obs, float* reward, int32_t* terminated,
                     int32_t* truncated) {
  std::int32_t move = 0;
  std::memcpy(&move, action, sizeof move);
  env->position += move == 1 ? 1 : -1;
  if (env->position < 0) env->position = 0;
  ++env->steps;
  const bool arrived = env->position == env->length - 1;
  observe(env, obs);
  *reward = arrived ? 1.0f : -0.01f;
  *terminated = arrived ? 1 : 0;
  *truncated = 0;  // Tandem applies max_episode_steps
}

}  // extern "C"
