// The RL learner's targets as pure functions: GAE for PPO (Schulman et al. 2016, "High-Dimensional
// Continuous Control Using Generalized Advantage Estimation") and V-trace for IMPALA (Espeholt et al.
// 2018, eq. 1 and the policy-gradient advantage of section 4.2).
//
// Every input is shaped [T, N] (N trajectories side by side) except `values`, [T + 1, N]. On the CPU
// the recursions run as scalar loops; on a GPU as tensor ops over the N columns at once, T steps back
// to front (a kernel or a few a step), so nothing is read back to the host and a CUDA graph can hold
// them (the captured V-trace update, update.hpp). Both compute in float64 and agree to rounding
// (tests/rl_returns_test.cpp runs the tensor ops on the CPU against the loops).
// Episode ends follow docs/FORMAT.md "What the steps mean": step t of column n
//   terminated      the MDP ended: nothing is bootstrapped after it;
//   truncated only  cut short (time limit): bootstrapped from final_values[t, n] = V(final_observations[t, n]);
//   neither         bootstrapped from values[t + 1, n] = V(observations[t + 1, n]).
// Either end also stops the recursion: nothing of the next episode flows back into this one.
// final_values is read only where a step is truncated and not terminated. values[T] bootstraps the
// last step of a column whose episode goes on.
//
// Arithmetic is in float64 whatever the inputs' floating dtype; results come back in rewards' dtype,
// on rewards' device.
// Threads: stateless; any thread.
#pragma once

#include <torch/types.h>

namespace tandem::rl {

struct EpisodeSteps {
  torch::Tensor rewards;       // [T, N] float
  torch::Tensor values;        // [T + 1, N] float: V(x_t), and V(x_T)
  torch::Tensor final_values;  // [T, N] float: V of the ended episode's last observation
  torch::Tensor terminated;    // [T, N] uint8 or bool
  torch::Tensor truncated;     // [T, N] uint8 or bool
};

struct GaeResult {
  torch::Tensor advantages;  // [T, N]: A_t = sum_l (gamma lambda)^l delta_{t+l}, within the episode
  torch::Tensor returns;     // [T, N]: advantages + values[:T], the value targets
};

// delta_t = r_t + gamma * next_t - V(x_t);  A_t = delta_t + gamma * lambda * (1 - end_t) * A_{t+1}
GaeResult gae(const EpisodeSteps& steps, double gamma, double lambda);

struct VtraceResult {
  torch::Tensor vs;             // [T, N]: the V-trace value targets v_s
  torch::Tensor pg_advantages;  // [T, N]: rho_t * (r_t + gamma * v_{t+1} - V(x_t))
};

// log_rhos [T, N]: log pi(a_t|x_t) - log mu(a_t|x_t), target minus behaviour.
//   rho_t = min(rho_bar, e^log_rho), c_t = min(c_bar, e^log_rho)
//   v_s = V(x_s) + sum_{t >= s} gamma^(t-s) (prod_{s <= i < t} c_i) rho_t delta_t, within the episode
// where delta_t = r_t + gamma * next_t - V(x_t). v_{t+1} in the advantage is next_t's V-trace target:
// v_{t+1} for a step inside the episode, final_values[t] after a truncation, 0 after a termination,
// values[T] after the last step.
VtraceResult vtrace(const EpisodeSteps& steps, const torch::Tensor& log_rhos, double gamma, double rho_bar,
                    double c_bar);

// The tensor-op forms, on the inputs' device whatever it is: gae() and vtrace() use them on a GPU.
GaeResult gae_by_columns(const EpisodeSteps& steps, double gamma, double lambda);
VtraceResult vtrace_by_columns(const EpisodeSteps& steps, const torch::Tensor& log_rhos, double gamma, double rho_bar,
                               double c_bar);

}  // namespace tandem::rl
