#!/usr/bin/env python3
"""tandem.envs from a Python loop: the synchronous VectorEnv against the AsyncVectorEnv (EnvPool's async
mode) with the same envs, threads and policy. Run from the repository root after building the Python
package:

    PYTHONPATH=build/python /usr/bin/python3 bench/python/envs_async_overlap.py --env hopper --envs 64 \\
        --threads 1 --batch 32 --hidden 512 --seconds 3 --json F

A step's time in the synchronous loop is the envs' plus the policy's: Python waits while the envs
step and the envs wait while the policy runs. In the async loop the policy acts on one batch while the
envs step the others, so a step costs about the larger of the two. Five rows, each the best of
--rounds rounds taken in turn, in env steps per wall second: each env without a policy (actions from a
fixed table of uniform draws), the policy alone (a torch MLP over a batch of observations, on one
torch thread), and each env driven by the policy. No peer: Gymnasium and EnvPool are not installed
here.
"""
import argparse
import json
import time

import numpy as np
import torch

import tandem.envs


def policy_for(obs_dim, act_dim, hidden):
    """An actor MLP (hidden x hidden, tanh; CleanRL's is 64), Gaussian means squashed into the action range."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(obs_dim, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, hidden),
                              torch.nn.Tanh(), torch.nn.Linear(hidden, act_dim))

    @torch.inference_mode()
    def act(obs):
        x = torch.from_numpy(obs)
        return torch.tanh(net(x) + 0.1 * torch.randn(x.shape[0], act_dim)).numpy()
    return act


def timed(loop, seconds):
    """Runs loop() (which returns the env steps it took) for about `seconds`; env steps per second."""
    loop()  # warm-up
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        steps += loop()
    return steps / (time.perf_counter() - start)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="hopper")
    parser.add_argument("--envs", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1, help="env stepping threads")
    parser.add_argument("--batch", type=int, default=32, help="the async env's batch size")
    parser.add_argument("--hidden", type=int, default=64, help="the policy MLP's width (CleanRL's: 64)")
    parser.add_argument("--seconds", type=float, default=3.0, help="each row, each round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", default="")
    a = parser.parse_args()
    torch.set_num_threads(1)

    sync = tandem.envs.make(a.env, num_envs=a.envs, threads=a.threads, seed=0)
    asyn = tandem.envs.make(a.env, num_envs=a.envs, batch_size=a.batch, threads=a.threads, seed=0)
    obs_dim, act_dim = sync.single_observation_space.shape[0], sync.single_action_space.shape[0]
    act = policy_for(obs_dim, act_dim, a.hidden)
    table = np.random.default_rng(0).uniform(-1, 1, (16, a.envs, act_dim)).astype(np.float32)
    state = {"obs": sync.reset(seed=0)[0]}
    first, info = asyn.reset(seed=0)
    state["batch"], state["ids"] = first, info["env_id"]

    def sync_alone():
        for i in range(10):
            sync.step(table[i])
        return 10 * a.envs

    def async_alone():
        for i in range(10):
            state["batch"], _, _, _, info = asyn.step(table[i, :a.batch], state["ids"])
            state["ids"] = info["env_id"]
        return 10 * a.batch

    def policy_alone():
        for _ in range(10):
            act(state["obs"])
        return 10 * a.envs

    def sync_loop():
        for _ in range(10):
            state["obs"] = sync.step(act(state["obs"]))[0]
        return 10 * a.envs

    def async_loop():
        for _ in range(10):
            obs, _, _, _, info = asyn.step(act(state["batch"]), state["ids"])
            state["batch"], state["ids"] = obs, info["env_id"]
        return 10 * a.batch

    rows = {"sync, no policy": sync_alone, "async, no policy": async_alone, "policy alone": policy_alone,
            "sync loop": sync_loop, "async loop": async_loop}
    best = {name: 0.0 for name in rows}
    for _ in range(a.rounds):
        for name, loop in rows.items():
            best[name] = max(best[name], timed(loop, a.seconds))
    print(f"tandem.envs, {a.env}: {a.envs} envs on {a.threads} thread(s), the async env in batches of {a.batch}, "
          f"a {a.hidden}x{a.hidden} policy; "
          f"env steps per wall second, best of {a.rounds} rounds of {a.seconds} s")
    for name, rate in best.items():
        print(f"  {name:<17} {rate / 1e3:9.1f} k")
    print(f"  async / sync loop {best['async loop'] / best['sync loop']:9.2f}x")
    line = {"bench": "envs_async_overlap", "env": a.env, "envs": a.envs, "threads": a.threads, "batch": a.batch,
            "hidden": a.hidden,
            "seconds": a.seconds, "rounds": a.rounds, **{k.replace(", ", "_").replace(" ", "_"): round(v) for k, v in best.items()}}
    print(json.dumps(line))
    if a.json:
        with open(a.json, "w") as f:
            f.write(json.dumps(line) + "\n")
    sync.close()
    asyn.close()


if __name__ == "__main__":
    main()
