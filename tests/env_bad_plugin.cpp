// Env plugins that are wrong on purpose, for tests/env_plugin_test.cpp; tests/meson.build builds one
// shared module per defined flaw:
//   ENV_PLUGIN_NO_STEP       does not export tandem_env_step
//   ENV_PLUGIN_OTHER_ABI     reports ABI version TANDEM_ENV_ABI_VERSION + 1
//   ENV_PLUGIN_NO_ACTIONS    reports neither a discrete nor a continuous action space
//   ENV_PLUGIN_HUGE_OBS      reports an observation of INT32_MAX floats
//   ENV_PLUGIN_CRASH         dereferences a null pointer in its first step
#include <csignal>
#include <cstring>

#include "envs/tandem_env.h"

struct tandem_env {
  int unused;
};

extern "C" {

uint32_t tandem_env_abi_version(void) {
#ifdef ENV_PLUGIN_OTHER_ABI
  return TANDEM_ENV_ABI_VERSION + 1;
#else
  return TANDEM_ENV_ABI_VERSION;
#endif
}

tandem_env* tandem_env_create(const char*, char*, size_t) { return new tandem_env{0}; }
void tandem_env_destroy(tandem_env* env) { delete env; }

void tandem_env_spaces_of(const tandem_env*, tandem_env_spaces* spaces) {
#if defined(ENV_PLUGIN_NO_ACTIONS)
  *spaces = tandem_env_spaces{3, 0, 0, 0.0f, 0.0f, 0};
#elif defined(ENV_PLUGIN_HUGE_OBS)
  *spaces = tandem_env_spaces{INT32_MAX, 2, 0, 0.0f, 0.0f, 0};
#else
  *spaces = tandem_env_spaces{3, 2, 0, 0.0f, 0.0f, 0};
#endif
}

void tandem_env_reset(tandem_env*, uint64_t, float* obs) { std::memset(obs, 0, 3 * sizeof(float)); }

#ifndef ENV_PLUGIN_NO_STEP
void tandem_env_step(tandem_env* env, const void*, float* obs, float* reward, int32_t* terminated, int32_t* truncated) {
#ifdef ENV_PLUGIN_CRASH
  // What a plugin's wild pointer ends in. Raised rather than dereferenced: under UBSan's
  // halt_on_error a null load would exit 1 before the SIGSEGV the test is about.
  (void)env;
  std::raise(SIGSEGV);
#endif
  std::memset(obs, 0, 3 * sizeof(float));
  *reward = 0.0f;
  *terminated = 0;
  *truncated = 0;
}
#endif

}  // extern "C"
