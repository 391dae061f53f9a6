// VecEnv: E envs of one spec stepped together over contiguous arrays, with auto-reset, on one thread or
// on K threads.
//
// Threads: one actor thread owns a VecEnv and makes every call on it; nothing it returns is
// synchronised. The spans it returns point into its own arrays and stay valid, with new contents,
// across step() calls. With threads = K > 1, step() steps the envs on the owner's thread and K - 1
// workers (envs/step_workers.hpp): each thread owns a contiguous slice of E / K envs (the first E % K
// one more) and steps it first, then takes the last unstepped envs of the slices still going, so a
// slow env or a late thread holds up one env, not a slice. It returns once all are done: every env
// writes its own rows of the arrays, no two threads touch one env in a step, and the workers' writes
// are published to the owner before step() returns. An env is stepped by its slice's thread unless
// another took it that step (made and first reset on the owner's). Every env draws from its own Rng
// and keeps all its state in itself and its rows (nothing per thread), so the results are
// bit-identical for every K and whichever thread steps an env.
//
// After each step(), for every env e:
//   observations()[e]       the observation to act on next: the first observation of a new episode
//                           when the last one just ended (auto-reset), else the step's observation
//   rewards()[e], terminated()[e], truncated()[e]   as Gymnasium's step() returns them; truncated is
//                           set when the episode reaches spec().max_episode_steps (or the env says
//                           so), whether or not it also terminated
//   final_observations()[e] valid only where the episode just ended: its last observation, which
//                           auto-reset replaced in observations(). A learner bootstraps from it when
//                           truncated && !terminated (bootstraps(e)); a terminated episode has no value
//                           after its last step, whatever truncated says
//   episode_returns()[e], episode_lengths()[e]   valid only where the episode just ended: its
//                           undiscounted return and its number of steps
// This is "same-step" auto-reset, as EnvPool's and Gymnasium 0.x's vector envs (and gym's
// AutoResetWrapper) do it: the step that ends an episode already returns the next episode's first
// observation, with the last one in final_observations(). It is not Gymnasium 1.x's default
// "next-step" auto-reset, where the step after the end returns the reset observation (reward 0)
// and ignores that step's action.
// Env e draws every reset from its own Rng, seeded env_seed(job_seed, actor_index, e, restarts)
// (seeds.hpp), so a run is reproducible, no two envs share a stream and a restarted actor draws new
// episodes. step() allocates nothing (unless an env throws: then step() rethrows the exception of
// the lowest env index that threw, after every other env has been stepped, and the VecEnv must not be
// stepped again).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "envs/env.hpp"
#include "envs/episode.hpp"
#include "envs/step_workers.hpp"

namespace tandem::envs {

class VecEnv {
 public:
  // Resets every env. All envs must have one spec (else UserError); at least one env.
  // `restarts`: the actor's incarnation (ControlClient::restarts), 0 for a first start.
  // `threads`: K, 1 to size() (else UserError); 1 steps everything on the owner's thread.
  VecEnv(std::vector<std::unique_ptr<Env>> envs, std::uint64_t job_seed, std::uint32_t actor_index,
         std::uint32_t restarts = 0, int threads = 1);
  ~VecEnv();
  VecEnv(const VecEnv&) = delete;
  VecEnv& operator=(const VecEnv&) = delete;

  const EnvSpec& spec() const { return spec_; }
  int size() const { return static_cast<int>(envs_.size()); }
  int threads() const { return workers_ ? workers_->threads() : 1; }

  // Discrete spaces: one index per env. Continuous: size() x action_dim floats, row-major. False
  // (and nothing stepped) when the span's size or the space's kind does not fit, or a discrete
  // index is out of range.
  [[nodiscard]] bool step(std::span<const std::int32_t> actions);
  [[nodiscard]] bool step(std::span<const float> actions);

  // Resets every env and forgets the episodes in progress. With `job_seed`, env e's stream restarts
  // from env_seed(job_seed, actor_index, e) (the constructor's rule, restart 0), so a reset with one
  // seed replays the same episodes; without it the streams go on. Runs on the stepping threads.
  void reset(std::optional<std::uint64_t> job_seed = std::nullopt);
  // Observations go into `rows` (size() x obs_dim floats, owned by the caller, alive until the next
  // observe_into) from the next reset() or step() on, and observations() views them; an empty span
  // goes back to the VecEnv's own array. So a caller can hand out each step's observations uncopied
  // (python/bindings/envs.cpp). UserError for another size.
  void observe_into(std::span<float> rows);

  std::span<const float> observations() const { return {observations_, obs_.size()}; }
  std::span<const float> rewards() const { return rewards_; }
  std::span<const std::uint8_t> terminated() const { return terminated_; }
  std::span<const std::uint8_t> truncated() const { return truncated_; }
  std::span<const float> final_observations() const { return final_obs_; }
  std::span<const double> episode_returns() const { return episode_returns_; }
  std::span<const std::int32_t> episode_lengths() const { return episode_lengths_; }
  bool done(int e) const { return terminated_[e] || truncated_[e]; }
  bool bootstraps(int e) const { return truncated_[e] && !terminated_[e]; }

 private:
  StepRow row(int e);  // env e's rows of the arrays
  void step_one(int e, ActionRef action);
  // Calls per_env(e) once for every env, on the workers' threads too when there are some.
  template <class PerEnv>
  void for_each_env(const PerEnv& per_env);

  EnvSpec spec_;
  std::uint32_t actor_index_;
  std::vector<std::unique_ptr<Env>> envs_;
  std::vector<Rng> rngs_;
  std::vector<float> obs_, final_obs_, rewards_;
  float* observations_ = nullptr;  // obs_, or the caller's rows (observe_into)
  std::vector<std::uint8_t> terminated_, truncated_;
  std::vector<Episode> episodes_;
  std::vector<double> episode_returns_;
  std::vector<std::int32_t> episode_lengths_;
  std::unique_ptr<StepWorkers> workers_;  // null when threads = 1
};

}  // namespace tandem::envs
