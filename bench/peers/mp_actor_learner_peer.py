#!/usr/bin/env python3
"""A torch.multiprocessing actor-learner in the style users write, timed for `tandem bench rollout --peer`.

The pattern of the PyTorch A3C/IMPALA examples: one `shared_model` whose parameters live in shared
memory (`share_memory()`); N actor processes (forked) each step their own vectorised numpy CartPoles
(cleanrl_ppo_peer.NumpyCartPole: Gymnasium's dynamics) with that model under no_grad, and put each
trajectory (numpy arrays of T steps x E envs, with the behaviour log-probs and values and the
bootstrap value) on an mp.Queue; one learner process (this one) takes trajectories off the queue and
runs CleanRL's PPO update (cleanrl_ppo_peer.ppo_update: 4 epochs x 4 minibatches, Adam 2.5e-4 annealed,
GAE 0.99/0.95, clip 0.2, ent 0.01, vf 0.5, grad-norm 0.5) directly on shared_model's parameters, so
the actors see every optimizer step at once (Hogwild-style reads, no locks, no versioning). A
trajectory acted by older weights is used as it is: the PPO ratio against its behaviour log-probs is
the only off-policy correction, as in such scripts.

The queue holds at most 2 trajectories per actor (backpressure). Actors use one torch thread each.
Measured: env steps/s the learner consumes, and time-to-solve: wall seconds from the start of main()
(after `import torch`, reported apart as import_s; the actors' start is included) until the mean
return of the last 100 finished episodes is >= 475. Stops there or at --total-steps.

Prints progress lines and one JSON line starting with {"bench": "mp_actor_learner_peer".
"""
import argparse
import json
import os
import queue
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cleanrl_ppo_peer import IMPORT_S, SOLVED_RETURN, Agent, NumpyCartPole, add_recipe_args, gae, ppo_update  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402


def actor(index, shared_model, trajectories, stop, args):
    torch.set_num_threads(1)
    torch.manual_seed(args.seed * 1000 + index)
    envs = NumpyCartPole(args.num_envs, args.seed * 1000 + index)
    T, E = args.num_steps, args.num_envs
    next_obs, next_done = envs.observations(), np.zeros(E, dtype=np.float32)
    while not stop.is_set():
        traj = {"obs": np.zeros((T, E, envs.obs_dim), np.float32), "actions": np.zeros((T, E), np.float32),
                "logprobs": np.zeros((T, E), np.float32), "rewards": np.zeros((T, E), np.float32),
                "dones": np.zeros((T, E), np.float32), "values": np.zeros((T, E), np.float32), "episode_returns": []}
        with torch.no_grad():
            for step in range(T):
                traj["obs"][step], traj["dones"][step] = next_obs, next_done
                action, logprob, _, value = shared_model.get_action_and_value(torch.from_numpy(next_obs))
                traj["actions"][step], traj["logprobs"][step] = action.numpy(), logprob.numpy()
                traj["values"][step] = value.flatten().numpy()
                next_obs, r, term, trunc, ep_returns, _ = envs.step(action.numpy())
                traj["rewards"][step] = r
                next_done = np.logical_or(term, trunc).astype(np.float32)
                traj["episode_returns"].extend(float(x) for x in ep_returns)
            traj["next_value"] = shared_model.get_value(torch.from_numpy(next_obs)).reshape(-1).numpy()
        traj["next_done"] = next_done.copy()
        while not stop.is_set():
            try:
                trajectories.put(traj, timeout=0.1)
                break
            except queue.Full:
                continue
    trajectories.cancel_join_thread()  # the learner has stopped reading: exit without flushing


def to_batch(traj, args):
    t = {k: torch.from_numpy(traj[k]) for k in ("obs", "actions", "logprobs", "rewards", "dones", "values")}
    advantages, returns = gae(t["rewards"], t["values"], t["dones"], torch.from_numpy(traj["next_value"]).reshape(1, -1),
                              torch.from_numpy(traj["next_done"]), args.gamma, args.gae_lambda)
    return {"obs": t["obs"].reshape(-1, t["obs"].shape[-1]), "logprobs": t["logprobs"].reshape(-1),
            "actions": t["actions"].reshape(-1), "advantages": advantages.reshape(-1),
            "returns": returns.reshape(-1), "values": t["values"].reshape(-1)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_recipe_args(ap)
    ap.add_argument("--actors", type=int, default=2, help="actor processes")
    args = ap.parse_args()
    t0 = time.perf_counter()
    torch.manual_seed(args.seed)
    shared_model = Agent(NumpyCartPole.obs_dim, NumpyCartPole.num_actions)
    shared_model.share_memory()
    optimizer = torch.optim.Adam(shared_model.parameters(), lr=args.learning_rate, eps=1e-5)
    trajectories, stop = mp.Queue(maxsize=2 * args.actors), mp.Event()
    procs = [mp.Process(target=actor, args=(i, shared_model, trajectories, stop, args), daemon=True)
             for i in range(args.actors)]
    for p in procs:
        p.start()
    per_update = args.num_steps * args.num_envs
    num_updates = max(1, args.total_steps // per_update)
    recent, episodes, consumed, solve_s, solve_step = [], 0, 0, None, None
    train_t0 = time.perf_counter()
    try:
        for update in range(1, num_updates + 1):
            traj = trajectories.get(timeout=120)
            consumed += per_update
            for ret in traj["episode_returns"]:
                recent.append(ret)
                episodes += 1
            del recent[:-100]
            if len(recent) == 100 and np.mean(recent) >= SOLVED_RETURN:
                solve_s, solve_step = time.perf_counter() - t0, consumed
                break
            optimizer.param_groups[0]["lr"] = (1.0 - (update - 1.0) / num_updates) * args.learning_rate
            ppo_update(shared_model, optimizer, to_batch(traj, args), args)
            if update % 20 == 0:
                elapsed = time.perf_counter() - train_t0
                print(f"step {consumed}  {consumed / elapsed:.0f} steps/s  "
                      f"mean return (last {len(recent)}) {np.mean(recent) if recent else 0:.1f}", flush=True)
    finally:
        elapsed = time.perf_counter() - train_t0
        stop.set()
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.terminate()
    print(json.dumps({"bench": "mp_actor_learner_peer", "env": "CartPole-v1", "torch": torch.__version__,
                      "actors": args.actors, "threads": torch.get_num_threads(), "envs": args.num_envs,
                      "rollout_steps": args.num_steps, "env_steps": consumed, "episodes": episodes,
                      "train_s": round(elapsed, 3), "env_steps_per_s": round(consumed / elapsed, 1),
                      "solved": solve_s is not None,
                      "time_to_solve_s": round(solve_s, 3) if solve_s is not None else None,
                      "solve_env_steps": solve_step, "import_s": round(IMPORT_S, 3),
                      "mean_return_last_100": round(float(np.mean(recent)), 2) if recent else None}))


if __name__ == "__main__":
    main()
