/* Tandem's C ABI for users' own environments, loaded with dlopen from `env.plugin = "libmyenv.so"`.
 *
 * A plugin is a shared library exporting every function below with C linkage. Tandem calls them for
 * an env handle from one thread at a time, but not always the same thread: with env.threads > 1 the
 * actor's threads hand envs to each other between steps (each call ordered after the last). Different
 * handles may be used from different threads at once, so keep no unsynchronised global state, and no
 * per-thread state (thread_local) that changes what a handle computes. A plugin must not print to
 * stdout, throw C++ exceptions across these functions, or call exit(); a crash inside the plugin
 * kills the actor process, whose supervisor reports it.
 *
 * Spaces: a discrete env sets num_actions > 0 and action_dim = 0 and reads one int32_t action; a
 * continuous env sets num_actions = 0, action_dim > 0 and reads action_dim floats, each meant to lie
 * in [action_low, action_high] (clip them yourself). max_episode_steps > 0 makes Tandem truncate
 * episodes at that length; 0 leaves it to the plugin's own truncated flag.
 */
#ifndef TANDEM_ENV_H
#define TANDEM_ENV_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped whenever a signature or struct below changes; Tandem refuses a plugin built for another. */
#define TANDEM_ENV_ABI_VERSION 1

typedef struct tandem_env tandem_env; /* the plugin's own env state, opaque to Tandem */

typedef struct tandem_env_spaces {
  int32_t obs_dim;
  int32_t num_actions;
  int32_t action_dim;
  float action_low;
  float action_high;
  int32_t max_episode_steps;
} tandem_env_spaces;

/* Returns TANDEM_ENV_ABI_VERSION as the plugin saw it when it was compiled. */
uint32_t tandem_env_abi_version(void);

/* `config` is the env.config string from the job file ("" when absent). Returns NULL on failure
 * after writing a one-line reason (NUL-terminated, at most error_size bytes) to `error`. */
tandem_env* tandem_env_create(const char* config, char* error, size_t error_size);
void tandem_env_destroy(tandem_env* env);

/* Fills `spaces`; the answer must not change over the env's life. */
void tandem_env_spaces_of(const tandem_env* env, tandem_env_spaces* spaces);

/* Starts an episode from `seed` and writes obs_dim floats to `obs`. */
void tandem_env_reset(tandem_env* env, uint64_t seed, float* obs);

/* Applies `action` (one int32_t, or action_dim floats) and writes obs_dim floats to `obs`, the
 * reward, and whether the episode terminated (1: no value after this step) or was truncated (1). */
void tandem_env_step(tandem_env* env, const void* action, float* obs, float* reward, int32_t* terminated,
                     int32_t* truncated);

#ifdef __cplusplus
}
#endif

#endif /* TANDEM_ENV_H */
