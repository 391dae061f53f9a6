#!/usr/bin/env python3
"""Time to solve a Python env: examples/python-cartpole-ppo.toml under `tandem run` beside the CleanRL PPO
recipe on the same env (bench/peers/cleanrl_ppo_peer.py --env), seed by seed in one run, alternating, so
both see the same machine. Run from the repository root after building tools/tandem, tandem-learner,
tandem-actor and the Python package:

    /usr/bin/python3 bench/python/python_env_solve.py --seeds 0 1 2 3 4

Ours: the learner's "solved: ... at env step N, T s" line (T from the learner's start); env steps/s =
N / T. The peer: its time_to_solve_s and solve_env_steps (from main()'s start, after import torch).
Prints a Markdown table and one JSON line.
"""
import argparse
import json
import os
import re
import subprocess
import sys

ENV = "examples.python.envs.cartpole:CartPole"
SOLVED = re.compile(r"solved: mean return ([\d.]+) over the last 100 episodes at env step (\d+), ([\d.]+) s")


def ours(seed, extra):
    cmd = ["build/tools/tandem", "run", "examples/python-cartpole-ppo.toml", "--set", "run.status=\"plain\"",
           "--set", "run.dashboard=false", "--set", f"env.seed={seed}", "--set", f"model.seed={seed}", *extra]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    m = SOLVED.search(out.stdout + out.stderr)  # the children's lines may come on either
    if out.returncode != 0 or not m:
        return {"solved": False, "rc": out.returncode, "tail": out.stdout[-400:] + out.stderr[-400:]}
    steps, secs = int(m.group(2)), float(m.group(3))
    return {"solved": True, "env_steps": steps, "seconds": secs, "env_steps_per_s": steps / secs}


def peer(seed):
    env = dict(os.environ, PYTHONPATH="build/python" + (":" + os.environ["PYTHONPATH"] if "PYTHONPATH" in os.environ else ""))
    cmd = [sys.executable, "bench/peers/cleanrl_ppo_peer.py", "--env", ENV, "--seed", str(seed)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, env=env)
    j = json.loads([line for line in out.stdout.splitlines() if line.startswith('{"bench"')][-1])
    if not j["solved"]:
        return {"solved": False, "env_steps_per_s": j["env_steps_per_s"]}
    return {"solved": True, "env_steps": j["solve_env_steps"], "seconds": j["time_to_solve_s"],
            "env_steps_per_s": j["solve_env_steps"] / j["time_to_solve_s"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    ap.add_argument("--set", action="append", default=[], help="extra key=value for our job")
    args = ap.parse_args()
    extra = [a for kv in args.set for a in ("--set", kv)]
    rows = []
    print("| seed | tandem: solved at / s / env steps/s | CleanRL recipe: solved at / s / env steps/s | "
          "steps/s ratio | load |\n| --- | --- | --- | --- | --- |", flush=True)
    for s in args.seeds:
        a, b = ours(s, extra), peer(s)
        load = open("/proc/loadavg").read().split()[0]
        fmt = lambda r: (f"{r['env_steps']:,} / {r['seconds']:.2f} s / {r['env_steps_per_s']:,.0f}" if r["solved"]
                         else f"not solved {r}")
        ratio = a.get("env_steps_per_s", 0) / b["env_steps_per_s"] if b.get("env_steps_per_s") else 0
        print(f"| {s} | {fmt(a)} | {fmt(b)} | {ratio:.1f}x | {load} |", flush=True)
        rows.append({"seed": s, "tandem": a, "cleanrl": b, "ratio": ratio, "load": float(load)})
    print(json.dumps({"bench": "python_env_solve", "env": ENV, "rows": rows}))


if __name__ == "__main__":
    main()
