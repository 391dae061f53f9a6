#!/usr/bin/env python3
"""The CleanRL continuous-control PPO recipe, stepping Tandem's env through `tandem.envs` (a user's loop).

The recipe is CleanRL's ppo_continuous_action.py (vwxyzjn/cleanrl), written here from its settings:
1 env x 2048 steps per rollout, 10 epochs x 32 minibatches of 64, Adam(lr 3e-4, eps 1e-5) annealed
linearly to 0 over the step budget, GAE gamma 0.99 lambda 0.95, clipped surrogate 0.2, clipped value
loss, per-minibatch advantage normalisation, entropy 0, value 0.5, global grad-norm clip 0.5; separate
64x64 tanh actor and critic with orthogonal init (sqrt(2); 0.01 on the action mean, 1.0 on the value),
a state-independent log-std starting at 0. The env is wrapped as its make_env() wraps it: episode
statistics on the raw rewards, actions clipped to the action space, observations normalised by a
running mean and variance and clipped to [-10, 10], rewards scaled by the running standard deviation
of the discounted return and clipped to [-10, 10]. As in the recipe, `done = terminated or truncated`:
nothing is bootstrapped at a time limit.

The env is the same C++ env Tandem's actors step (`tandem.envs.make(name, num_envs=1, seed=seed)`),
so a comparison with `tandem run examples/mujoco-*.toml` differs only in what runs around the env.

Prints a progress line per rollout and one JSON line starting with {"bench": "cleanrl_ppo_continuous_peer"}:
the returns of the finished episodes against env steps and wall seconds (from the start of main(),
after `import torch`, reported apart as import_s).
"""
import argparse
import json
import time

_t_import = time.perf_counter()
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
from torch.distributions.normal import Normal  # noqa: E402

import tandem.envs  # noqa: E402

IMPORT_S = time.perf_counter() - _t_import


class RunningMeanStd:
    """Mean and variance of a stream of batches (Chan et al.'s parallel update), as Gymnasium keeps them."""

    def __init__(self, shape=(), epsilon=1e-4):
        self.mean = np.zeros(shape, np.float64)
        self.var = np.ones(shape, np.float64)
        self.count = epsilon

    def update(self, batch):
        b_mean, b_var, b_count = batch.mean(axis=0), batch.var(axis=0), batch.shape[0]
        delta, total = b_mean - self.mean, self.count + b_count
        self.mean = self.mean + delta * b_count / total
        m2 = self.var * self.count + b_var * b_count + delta**2 * self.count * b_count / total
        self.var, self.count = m2 / total, total


class NormalizedEnv:
    """The recipe's wrappers around a tandem.envs.VectorEnv: clip actions, normalise observations and
    rewards, both clipped to [-10, 10]; episode returns are the raw ones (recorded below the wrappers)."""

    def __init__(self, envs, gamma, epsilon=1e-8):
        self.envs, self.gamma, self.epsilon = envs, gamma, epsilon
        self.obs_rms = RunningMeanStd(envs.single_observation_space.shape)
        self.return_rms = RunningMeanStd()
        self.returns = np.zeros(envs.num_envs)
        space = envs.single_action_space
        self.low, self.high = space.low, space.high

    def _obs(self, obs):
        self.obs_rms.update(obs)
        return np.clip((obs - self.obs_rms.mean) / np.sqrt(self.obs_rms.var + self.epsilon), -10, 10).astype(np.float32)

    def reset(self, seed):
        obs, _ = self.envs.reset(seed=seed)
        return self._obs(obs)

    def step(self, actions):
        obs, rewards, terminated, truncated, info = self.envs.step(np.clip(actions, self.low, self.high))
        done = terminated | truncated
        self.returns = self.returns * self.gamma * (1 - done) + rewards
        self.return_rms.update(self.returns)
        scaled = np.clip(rewards / np.sqrt(self.return_rms.var + self.epsilon), -10, 10)
        return self._obs(obs), scaled.astype(np.float32), done, info


def layer_init(layer, std=np.sqrt(2), bias_const=0.0):
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


class Agent(nn.Module):
    def __init__(self, obs_dim, act_dim):
        super().__init__()
        self.critic = nn.Sequential(layer_init(nn.Linear(obs_dim, 64)), nn.Tanh(), layer_init(nn.Linear(64, 64)),
                                    nn.Tanh(), layer_init(nn.Linear(64, 1), std=1.0))
        self.actor_mean = nn.Sequential(layer_init(nn.Linear(obs_dim, 64)), nn.Tanh(), layer_init(nn.Linear(64, 64)),
                                        nn.Tanh(), layer_init(nn.Linear(64, act_dim), std=0.01))
        self.actor_logstd = nn.Parameter(torch.zeros(1, act_dim))

    def value(self, x):
        return self.critic(x)

    def act(self, x, action=None):
        mean = self.actor_mean(x)
        dist = Normal(mean, self.actor_logstd.expand_as(mean).exp())
        if action is None:
            action = dist.sample()
        return action, dist.log_prob(action).sum(1), dist.entropy().sum(1), self.critic(x)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env", default="hopper", help="a tandem.envs name (the job config's env.name)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--total-steps", type=int, default=1000000)
    p.add_argument("--num-steps", type=int, default=2048)
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--minibatches", type=int, default=32)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--gamma", type=float, default=0.99)
    p.add_argument("--gae-lambda", type=float, default=0.95)
    p.add_argument("--threads", type=int, default=0, help="torch threads; 0 keeps torch's default")
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args()
    start = time.perf_counter()
    if args.threads:
        torch.set_num_threads(args.threads)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)

    envs = tandem.envs.make(args.env, num_envs=1, seed=args.seed)
    env = NormalizedEnv(envs, args.gamma)
    obs_dim, act_dim = envs.single_observation_space.shape[0], envs.single_action_space.shape[0]
    agent = Agent(obs_dim, act_dim)
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.lr, eps=1e-5)
    n, batch = args.num_steps, args.num_steps
    minibatch = batch // args.minibatches
    obs_buf = torch.zeros(n, obs_dim)
    act_buf = torch.zeros(n, act_dim)
    logp_buf, rew_buf, done_buf, val_buf = (torch.zeros(n) for _ in range(4))

    curve = []  # (env steps, wall s, episode return)
    steps = 0
    next_obs = torch.from_numpy(env.reset(args.seed))
    next_done = torch.zeros(1)
    updates = args.total_steps // batch
    for update in range(1, updates + 1):
        for group in optimizer.param_groups:
            group["lr"] = (1.0 - (update - 1.0) / updates) * args.lr
        for t in range(n):
            steps += 1
            obs_buf[t], done_buf[t] = next_obs[0], next_done[0]
            with torch.no_grad():
                action, logp, _, value = agent.act(next_obs)
            act_buf[t], logp_buf[t], val_buf[t] = action[0], logp[0], value[0, 0]
            o, r, d, info = env.step(action.numpy())
            rew_buf[t] = float(r[0])
            next_obs, next_done = torch.from_numpy(o), torch.from_numpy(d.astype(np.float32))
            if info["_episode"][0]:
                curve.append((steps, time.perf_counter() - start, float(info["episode"]["r"][0])))

        with torch.no_grad():  # GAE over the rollout, bootstrapping from the value after it
            next_value = agent.value(next_obs)[0, 0]
            adv = torch.zeros(n)
            last = 0.0
            for t in reversed(range(n)):
                not_done = 1.0 - (next_done[0] if t == n - 1 else done_buf[t + 1])
                following = next_value if t == n - 1 else val_buf[t + 1]
                delta = rew_buf[t] + args.gamma * following * not_done - val_buf[t]
                adv[t] = last = delta + args.gamma * args.gae_lambda * not_done * last
            returns = adv + val_buf

        for _ in range(args.epochs):
            order = torch.randperm(batch)
            for s in range(0, batch, minibatch):
                idx = order[s:s + minibatch]
                _, logp, entropy, value = agent.act(obs_buf[idx], act_buf[idx])
                ratio = (logp - logp_buf[idx]).exp()
                a = adv[idx]
                a = (a - a.mean()) / (a.std() + 1e-8)
                pg_loss = torch.max(-a * ratio, -a * ratio.clamp(0.8, 1.2)).mean()
                value = value.view(-1)
                clipped = val_buf[idx] + (value - val_buf[idx]).clamp(-0.2, 0.2)
                v_loss = 0.5 * torch.max((value - returns[idx]) ** 2, (clipped - returns[idx]) ** 2).mean()
                loss = pg_loss - 0.0 * entropy.mean() + 0.5 * v_loss
                optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(agent.parameters(), 0.5)
                optimizer.step()
        if not args.quiet:
            recent = [r for _, _, r in curve[-10:]]
            print(f"update {update}/{updates}: {steps} env steps, {time.perf_counter() - start:.1f} s, "
                  f"mean return of the last {len(recent)} episodes {np.mean(recent) if recent else float('nan'):.1f}",
                  flush=True)
    envs.close()
    wall = time.perf_counter() - start
    print(json.dumps({"bench": "cleanrl_ppo_continuous_peer", "env": args.env, "seed": args.seed, "env_steps": steps,
                      "wall_s": round(wall, 2), "import_s": round(IMPORT_S, 2), "env_steps_per_s": round(steps / wall),
                      "curve": [[s, round(w, 2), round(r, 2)] for s, w, r in curve]}))


if __name__ == "__main__":
    main()
