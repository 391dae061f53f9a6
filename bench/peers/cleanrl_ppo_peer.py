#!/usr/bin/env python3
"""CleanRL's PPO recipe on CartPole-v1 as a user runs it today, timed for `tandem bench rollout --peer`.

The recipe is CleanRL's cleanrl/ppo.py (vwxyzjn/cleanrl): 4 envs x 128 steps per rollout, 4 epochs x
4 minibatches of 128, Adam(lr 2.5e-4, eps 1e-5) with the rate annealed linearly to 0 over the step
budget, GAE gamma 0.99 lambda 0.95, clipped surrogate 0.2, clipped value loss, per-minibatch advantage
normalisation, entropy 0.01, value 0.5, global grad-norm clip 0.5, and separate 64x64 tanh actor and
critic with orthogonal init (sqrt(2); 0.01 on the policy output, 1.0 on the value output). As in the
Gymnasium version of ppo.py, `done = terminated or truncated`: a truncated episode is not bootstrapped.

The environment is CartPole-v1 with Gymnasium's dynamics (classic_control/cartpole.py: Euler,
tau 0.02, force 10, thresholds 12 degrees and 2.4, state in float64, float32 observations, reward 1
on every step including the terminating one, resets uniform in [-0.05, 0.05], TimeLimit 500),
vectorised over the envs in numpy, so no gym is needed.

What differs from ppo.py, and why:
  * NumpyCartPole steps all envs in one numpy call instead of gym.vector.SyncVectorEnv's Python loop
    over gym.Env objects; that favours this peer (fewer interpreter steps per env step).
  * Auto-reset happens in the same step (Gymnasium 0.29 SyncVectorEnv), with the episode's return and
    length recorded as RecordEpisodeStatistics would.
  * No tensorboard writer and no per-episode print; instead this script measures: env steps/s and
    time-to-solve, the wall seconds from the start of main() (after `import torch`, which it reports
    apart as import_s) until the mean return of the last 100 finished episodes is >= 475. It stops
    there, or at --total-steps (CleanRL's 500000 by default; the lr schedule runs over it).
  * --env MODULE:CLASS runs a Gymnasium-API env written in Python (docs/RL.md) instead, stepped one env
    after another with auto-reset by tandem.pyenv.VecPyEnv, the loop tandem's Python rollout actor uses
    (SyncVectorEnv's loop, without gymnasium), so a comparison differs only in what runs around the env.
  * torch runs on the CPU with its default thread count (what ppo.py does on a machine without CUDA).

Prints progress lines and one JSON line starting with {"bench": "cleanrl_ppo_peer".
"""
import argparse
import importlib.util
import json
import pathlib
import time

_t_import = time.perf_counter()
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
from torch.distributions.categorical import Categorical  # noqa: E402

IMPORT_S = time.perf_counter() - _t_import
SOLVED_RETURN = 475.0


class NumpyCartPole:
    """E CartPole-v1 envs stepped together; Gymnasium's equations, auto-reset in the same step."""

    gravity, masscart, masspole, length, force_mag, tau = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02
    total_mass = masscart + masspole
    polemass_length = masspole * length
    theta_threshold = 12 * 2 * np.pi / 360
    x_threshold = 2.4
    max_steps = 500
    obs_dim, num_actions = 4, 2

    def __init__(self, num_envs, seed):
        self.n = num_envs
        self.rng = np.random.default_rng(seed)
        self.state = self.rng.uniform(-0.05, 0.05, size=(num_envs, 4))
        self.steps = np.zeros(num_envs, dtype=np.int64)
        self.returns = np.zeros(num_envs)

    def observations(self):
        return self.state.astype(np.float32)

    def step(self, actions):
        """actions: int array [E]. Returns obs, reward, terminated, truncated, finished returns, lengths."""
        x, x_dot, theta, theta_dot = self.state.T
        force = np.where(actions == 1, self.force_mag, -self.force_mag)
        costheta, sintheta = np.cos(theta), np.sin(theta)
        temp = (force + self.polemass_length * theta_dot**2 * sintheta) / self.total_mass
        thetaacc = (self.gravity * sintheta - costheta * temp) / (
            self.length * (4.0 / 3.0 - self.masspole * costheta**2 / self.total_mass))
        xacc = temp - self.polemass_length * thetaacc * costheta / self.total_mass
        self.state = np.stack([x + self.tau * x_dot, x_dot + self.tau * xacc,
                               theta + self.tau * theta_dot, theta_dot + self.tau * thetaacc], axis=1)
        x, theta = self.state[:, 0], self.state[:, 2]
        terminated = (x < -self.x_threshold) | (x > self.x_threshold) | \
                     (theta < -self.theta_threshold) | (theta > self.theta_threshold)
        reward = np.ones(self.n, dtype=np.float32)
        self.steps += 1
        self.returns += reward
        truncated = self.steps >= self.max_steps
        done = terminated | truncated
        finished_returns, finished_lengths = self.returns[done].copy(), self.steps[done].copy()
        if done.any():
            self.state[done] = self.rng.uniform(-0.05, 0.05, size=(int(done.sum()), 4))
            self.steps[done] = 0
            self.returns[done] = 0.0
        return self.observations(), reward, terminated, truncated, finished_returns, finished_lengths


class PythonEnvs:
    """--env MODULE:CLASS: E Python envs behind NumpyCartPole's interface (tandem.pyenv.VecPyEnv)."""

    def __init__(self, name, kwargs, num_envs, seed):
        # By path: the pure-Python file alone, not the tandem package (its extension, its rings).
        path = pathlib.Path(__file__).resolve().parents[2] / "python" / "tandem" / "pyenv.py"
        spec = importlib.util.spec_from_file_location("tandem_pyenv", path)
        pyenv = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(pyenv)
        self.vec = pyenv.VecPyEnv(name, kwargs, num_envs, seed)
        self.obs_dim, self.num_actions = self.vec.spec["obs_dim"], self.vec.spec["num_actions"]

    def observations(self):
        return self.vec.obs.copy()

    def step(self, actions):
        v = self.vec
        v.step(actions)
        returns = np.array([r for _, r, _ in v.done_episodes])
        lengths = np.array([n for _, _, n in v.done_episodes])
        return v.obs.copy(), v.rewards.copy(), v.terminated.astype(bool), v.truncated.astype(bool), returns, lengths


def layer_init(layer, std=np.sqrt(2), bias_const=0.0):
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


class Agent(nn.Module):
    def __init__(self, obs_dim, num_actions):
        super().__init__()
        self.critic = nn.Sequential(
            layer_init(nn.Linear(obs_dim, 64)), nn.Tanh(),
            layer_init(nn.Linear(64, 64)), nn.Tanh(),
            layer_init(nn.Linear(64, 1), std=1.0))
        self.actor = nn.Sequential(
            layer_init(nn.Linear(obs_dim, 64)), nn.Tanh(),
            layer_init(nn.Linear(64, 64)), nn.Tanh(),
            layer_init(nn.Linear(64, num_actions), std=0.01))

    def get_value(self, x):
        return self.critic(x)

    def get_action_and_value(self, x, action=None):
        logits = self.actor(x)
        probs = Categorical(logits=logits)
        if action is None:
            action = probs.sample()
        return action, probs.log_prob(action), probs.entropy(), self.critic(x)


def ppo_update(agent, optimizer, b, args):
    """CleanRL's update: epochs x minibatches over the flattened batch b (a dict of tensors)."""
    batch_size = b["obs"].shape[0]
    minibatch_size = batch_size // args.num_minibatches
    b_inds = np.arange(batch_size)
    for _ in range(args.update_epochs):
        np.random.shuffle(b_inds)
        for start in range(0, batch_size, minibatch_size):
            mb = b_inds[start:start + minibatch_size]
            _, newlogprob, entropy, newvalue = agent.get_action_and_value(b["obs"][mb], b["actions"].long()[mb])
            ratio = (newlogprob - b["logprobs"][mb]).exp()
            mb_adv = b["advantages"][mb]
            mb_adv = (mb_adv - mb_adv.mean()) / (mb_adv.std() + 1e-8)
            pg_loss = torch.max(-mb_adv * ratio, -mb_adv * torch.clamp(ratio, 1 - args.clip_coef, 1 + args.clip_coef)).mean()
            newvalue = newvalue.view(-1)
            v_unclipped = (newvalue - b["returns"][mb]) ** 2
            v_clipped = b["values"][mb] + torch.clamp(newvalue - b["values"][mb], -args.clip_coef, args.clip_coef)
            v_loss = 0.5 * torch.max(v_unclipped, (v_clipped - b["returns"][mb]) ** 2).mean()
            loss = pg_loss - args.ent_coef * entropy.mean() + v_loss * args.vf_coef
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
            optimizer.step()


def gae(rewards, values, dones, next_value, next_done, gamma, lam):
    """CleanRL's GAE: dones[t] is whether obs[t] started a new episode; tensors [T, E]."""
    steps = rewards.shape[0]
    advantages = torch.zeros_like(rewards)
    lastgaelam = 0
    for t in reversed(range(steps)):
        if t == steps - 1:
            nextnonterminal, nextvalues = 1.0 - next_done, next_value
        else:
            nextnonterminal, nextvalues = 1.0 - dones[t + 1], values[t + 1]
        delta = rewards[t] + gamma * nextvalues * nextnonterminal - values[t]
        advantages[t] = lastgaelam = delta + gamma * lam * nextnonterminal * lastgaelam
    return advantages, advantages + values


def add_recipe_args(ap):
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--env", default="", help="MODULE:CLASS of a Python env (default: NumpyCartPole)")
    ap.add_argument("--env-kwargs", default="{}", help="its keyword arguments, JSON")
    ap.add_argument("--total-steps", type=int, default=500000, help="step budget (CleanRL's total_timesteps)")
    ap.add_argument("--learning-rate", type=float, default=2.5e-4)
    ap.add_argument("--num-envs", type=int, default=4)
    ap.add_argument("--num-steps", type=int, default=128)
    ap.add_argument("--gamma", type=float, default=0.99)
    ap.add_argument("--gae-lambda", type=float, default=0.95)
    ap.add_argument("--num-minibatches", type=int, default=4)
    ap.add_argument("--update-epochs", type=int, default=4)
    ap.add_argument("--clip-coef", type=float, default=0.2)
    ap.add_argument("--ent-coef", type=float, default=0.01)
    ap.add_argument("--vf-coef", type=float, default=0.5)
    ap.add_argument("--max-grad-norm", type=float, default=0.5)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_recipe_args(ap)
    args = ap.parse_args()
    t0 = time.perf_counter()
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    envs = (PythonEnvs(args.env, json.loads(args.env_kwargs), args.num_envs, args.seed) if args.env
            else NumpyCartPole(args.num_envs, args.seed))
    agent = Agent(envs.obs_dim, envs.num_actions)
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)
    T, E = args.num_steps, args.num_envs
    obs = torch.zeros((T, E, envs.obs_dim))
    actions, logprobs, rewards, dones, values = (torch.zeros((T, E)) for _ in range(5))
    next_obs, next_done = torch.Tensor(envs.observations()), torch.zeros(E)
    num_updates = max(1, args.total_steps // (T * E))
    recent, episodes, global_step, solve_s, solve_step = [], 0, 0, None, None
    train_t0 = time.perf_counter()
    for update in range(1, num_updates + 1):
        optimizer.param_groups[0]["lr"] = (1.0 - (update - 1.0) / num_updates) * args.learning_rate
        for step in range(T):
            global_step += E
            obs[step], dones[step] = next_obs, next_done
            with torch.no_grad():
                action, logprob, _, value = agent.get_action_and_value(next_obs)
                values[step] = value.flatten()
            actions[step], logprobs[step] = action, logprob
            o, r, term, trunc, ep_returns, _ = envs.step(action.numpy())
            rewards[step] = torch.tensor(r)
            next_obs, next_done = torch.Tensor(o), torch.Tensor(np.logical_or(term, trunc).astype(np.float32))
            for ret in ep_returns:
                recent.append(float(ret))
                episodes += 1
            del recent[:-100]
            if solve_s is None and len(recent) == 100 and np.mean(recent) >= SOLVED_RETURN:
                solve_s, solve_step = time.perf_counter() - t0, global_step
        if solve_s is not None:
            break
        with torch.no_grad():
            next_value = agent.get_value(next_obs).reshape(1, -1)
            advantages, returns = gae(rewards, values, dones, next_value, next_done, args.gamma, args.gae_lambda)
        batch = {"obs": obs.reshape((-1, envs.obs_dim)), "logprobs": logprobs.reshape(-1),
                 "actions": actions.reshape(-1), "advantages": advantages.reshape(-1),
                 "returns": returns.reshape(-1), "values": values.reshape(-1)}
        ppo_update(agent, optimizer, batch, args)
        if update % 20 == 0:
            elapsed = time.perf_counter() - train_t0
            print(f"step {global_step}  {global_step / elapsed:.0f} steps/s  "
                  f"mean return (last {len(recent)}) {np.mean(recent) if recent else 0:.1f}", flush=True)
    elapsed = time.perf_counter() - train_t0
    print(json.dumps({"bench": "cleanrl_ppo_peer", "env": args.env or "CartPole-v1", "torch": torch.__version__,
                      "threads": torch.get_num_threads(), "envs": E, "rollout_steps": T,
                      "env_steps": global_step, "episodes": episodes, "train_s": round(elapsed, 3),
                      "env_steps_per_s": round(global_step / elapsed, 1), "solved": solve_s is not None,
                      "time_to_solve_s": round(solve_s, 3) if solve_s is not None else None,
                      "solve_env_steps": solve_step, "import_s": round(IMPORT_S, 3),
                      "mean_return_last_100": round(float(np.mean(recent)), 2) if recent else None}))


if __name__ == "__main__":
    main()
