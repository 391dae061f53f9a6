// Seeds: every random stream of an RL job derives from its one env.seed here, and only here.
// This header is the reference; python/tandem/seeds.py mirrors it for the Python rollout actor, and
// tests/env_seeds_test.cpp holds the mirror to it over a table of (seed, actor, env, restart) cases.
//
// Who calls: VecEnv (each env's reset stream), the C++ rollout actor (its envs and its action
// sampler) and the RL evaluator. Pure constexpr functions of their arguments: any thread.
//
// Why each rule is what it is:
//  * env_seed chains one splitmix64 mix per index. Each link is a bijection of its input word, so for
//    one job seed and restart count two envs of one actor, or one env index of two actors, never share
//    a seed (tests/env_vec_test.cpp checks it).
//  * A restarted actor (the launcher's restart count, ControlClient::restarts) draws new episodes and
//    actions rather than replaying the killed incarnation's: restart r > 0 mixes r into the restart-0
//    seed. Restart 0 is the plain three-index chain, so a run that never restarts (every deterministic
//    run) keeps the seeds it always had. Mixing r in last, rather than folding it into the job seed
//    (seed + r), keeps job seed s restarted r + 1 times apart from job seed s + 1 restarted r times.
//  * action_seed uses env indices from 2^40 up, which no env reaches (env.envs is at most 65536), so
//    the sampler's seed is never one of its actor's restart-0 env seeds.
//  * Evaluators play from their own job seed, the same on every restart and version, so versions are
//    compared on equal episodes and never on a rollout actor's.
#pragma once

#include <cstdint>

namespace tandem::envs {

// splitmix64 (Steele, Lea, Flood 2014): the whole generator state is one word, every output a full
// 64-bit mix. Used both to derive seeds and as the envs' random stream (Rng, env.hpp).
constexpr std::uint64_t splitmix64_mix(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// The seed of env `env_index` of actor `actor_index` in a job seeded `job_seed`, in the actor's
// incarnation `restarts` (0: first start):
//   base = splitmix64_mix(splitmix64_mix(splitmix64_mix(job_seed) + actor_index) + env_index)
//   restarts == 0 ? base : splitmix64_mix(base + restarts)
constexpr std::uint64_t env_seed(std::uint64_t job_seed, std::uint64_t actor_index, std::uint64_t env_index,
                                 std::uint64_t restarts = 0) {
  const std::uint64_t base = splitmix64_mix(splitmix64_mix(splitmix64_mix(job_seed) + actor_index) + env_index);
  return restarts == 0 ? base : splitmix64_mix(base + restarts);
}

inline constexpr std::uint64_t kActionSeedIndex = std::uint64_t{1} << 40;

// The seed of a rollout actor's action sampler: env_seed(job_seed, actor_index, 2^40 + restarts).
constexpr std::uint64_t action_seed(std::uint64_t job_seed, std::uint64_t actor_index, std::uint64_t restarts) {
  return env_seed(job_seed, actor_index, kActionSeedIndex + restarts);
}

// The job seed evaluators seed their envs from (env_seed(eval_seed(s), index, e)), given env.seed s.
constexpr std::uint64_t eval_seed(std::uint64_t job_seed) {
  return splitmix64_mix(job_seed ^ 0x6576616c75617465ULL);  // "evaluate"
}

}  // namespace tandem::envs
