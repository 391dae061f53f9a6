#!/usr/bin/env python3
"""MuJoCo PPO against the CleanRL recipe: for each task and seed, the peer to its step budget, then
`tandem run` until it reaches the peer's return (or a cap), on the same machine, one after the other.
Run from the repository root after building tools/tandem, tandem-learner, tandem-actor and the Python
package:

    /usr/bin/python3 bench/python/mujoco_vs_cleanrl.py --tasks hopper halfcheetah --seeds 0 1 2 \\
        --budget 300000 --json docs/results/F.json --svg docs/results/F.svg

The measure, the same for both: the mean return of the last 100 finished training episodes (raw
rewards, the policy sampling its actions). The peer's is taken from its episodes (bench/peers/
cleanrl_ppo_continuous_peer.py prints every one); Tandem's is the learner's own (its `episode_return`
in the run's metrics.jsonl), and the learner stops itself there (rl.stop_on_return, rl.stop_return =
the peer's return). Wall time: the peer's from its main() (after `import torch`); Tandem's the
learner row's time_s, from the launcher's start (process start-up included).

Prints a Markdown table and one JSON line (also to --json); --svg draws return against env steps and
against wall seconds for both, one row of charts per task, with plain Python (`--draw A.json B.json
--svg F.svg` draws the rows of earlier runs together, running nothing).

On a many-core host the peer may run its seeds side by side (--peers-at-once, one or two torch threads
each), and Tandem's runs follow one at a time, alone on the host. Where one sitting is too long (a
device call lasts 10 minutes at most), --peers-only --json P runs the peers, and --peers-from P runs
Tandem's side against them later on the same host.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import svg_charts
from tandem_jobs import WINDOW, Job, RunFailed, learner_curve, run_jobs


def trailing_means(episodes):
    """[(env steps, wall s, return)] per episode -> the same points with the trailing mean of the returns."""
    out, recent = [], []
    for steps, wall, ret in episodes:
        recent.append(ret)
        if len(recent) > WINDOW:
            recent.pop(0)
        out.append((steps, wall, sum(recent) / len(recent)))
    return out


def start_peer(task, seed, budget, threads):
    env = dict(os.environ, PYTHONPATH="build/python" + (":" + os.environ["PYTHONPATH"] if "PYTHONPATH" in os.environ else ""))
    cmd = [sys.executable, "bench/peers/cleanrl_ppo_continuous_peer.py", "--env", task, "--seed", str(seed),
           "--total-steps", str(budget), "--threads", str(threads), "--quiet"]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def finish_peer(proc):
    stdout, stderr = proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(proc.args)} failed ({proc.returncode}):\n{stderr[-800:]}")
    j = json.loads([line for line in stdout.splitlines() if line.startswith('{"bench"')][-1])
    curve = trailing_means(j["curve"])
    return {"env_steps": j["env_steps"], "wall_s": j["wall_s"], "env_steps_per_s": j["env_steps_per_s"],
            "return": curve[-1][2], "curve": [[s, w, round(r, 1)] for s, w, r in curve]}


def peers(pairs, args):
    """The peer of each (task, seed), keyed by (task, seed): one after another, or all at once
    (--peers-at-once), or read back from an earlier run's JSON (--peers-from); and whether they ran at once."""
    if args.peers_from:
        earlier = json.loads(open(args.peers_from).read())
        return {(r["task"], r["seed"]): r["cleanrl"] for r in earlier["rows"]}, earlier.get("peers_at_once", False)
    if args.peers_at_once:
        procs = {pair: start_peer(*pair, args.budget, args.peer_threads) for pair in pairs}
        return {pair: finish_peer(proc) for pair, proc in procs.items()}, True
    return {pair: finish_peer(start_peer(*pair, args.budget, args.peer_threads)) for pair in pairs}, False


def ours(config, task, seed, target, cap_steps, sets):
    job = Job(f"{task} seed {seed}", "build/tools/tandem", config,
              [f"env.seed={seed}", f"model.seed={seed}", f"rl.total_env_steps={cap_steps}", "rl.stop_on_return=true",
               f"rl.stop_return={target}", *sets], tempfile.mkdtemp(prefix=f"tandem-{task}-{seed}-"))
    run_jobs([job])
    curve = learner_curve(job.run_dir())
    hit = next((c for c in curve if c[2] >= target), None)
    return {"reached": hit is not None, "env_steps": hit[0] if hit else curve[-1][0],
            "wall_s": hit[1] if hit else curve[-1][1], "return": hit[2] if hit else curve[-1][2],
            "run_wall_s": job.wall_s, "run_dir": job.runs_dir, "curve": curve}


def svg(results, path):
    w, h = 520, 300
    colors = {"cleanrl": "#1f77b4", "tandem": "#ff7f0e"}
    tasks = sorted({r["task"] for r in results})
    charts = []
    for row, task in enumerate(tasks):
        runs = [r for r in results if r["task"] == task]
        for col, (index, xlabel) in enumerate(((0, "env steps"), (1, "wall seconds"))):
            lines = [svg_charts.line(colors[who], [(p[index], p[2]) for p in r[who]["curve"]])
                     for r in runs for who in colors if r[who]]
            charts.append(svg_charts.chart(col * w, 30 + row * h, w, h, f"{task}: training return (last {WINDOW} episodes)",
                                           xlabel, lines=lines, targets=[r["cleanrl"]["return"] for r in runs]))
    legend = [(colors["cleanrl"], "CleanRL recipe (peer)"), (colors["tandem"], "Tandem (tandem run)"),
              ("gray", "dashed: the peer's return at its budget")]
    svg_charts.write(path, svg_charts.page(2 * w, 30 + len(tasks) * h, legend, charts))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", nargs="+", default=["hopper", "halfcheetah"])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--budget", type=int, default=300000, help="the peer's env steps")
    ap.add_argument("--cap", type=int, default=3000000, help="Tandem's env steps at most")
    ap.add_argument("--config", default="examples/mujoco-{task}-fast.toml", help="Tandem's config; {task} is replaced")
    ap.add_argument("--peer-threads", type=int, default=0, help="the peer's torch threads; 0 keeps torch's default")
    ap.add_argument("--peers-at-once", action="store_true",
                    help="run every task's and seed's peer side by side first (a many-core host), then Tandem's runs one at a time")
    ap.add_argument("--peers-only", action="store_true", help="run the peers alone (--json keeps them for --peers-from)")
    ap.add_argument("--peers-from", metavar="JSON", help="take the peers' results from this earlier run instead of running them")
    ap.add_argument("--set", action="append", default=[], help="extra key=value for Tandem's job")
    ap.add_argument("--json", help="also write the JSON line here")
    ap.add_argument("--svg", help="draw the curves here")
    ap.add_argument("--draw", nargs="+", metavar="JSON", help="run nothing: draw --svg from these files' rows")
    args = ap.parse_args()
    if args.draw:
        svg([row for f in args.draw for row in json.loads(open(f).read())["rows"]], args.svg)
        return
    results = []
    print("| task | seed | CleanRL recipe: return at budget / wall s / env steps/s | Tandem: reached at env steps / "
          "wall s | wall ratio | load |\n| --- | --- | --- | --- | --- | --- |", flush=True)
    pairs = [(task, seed) for task in args.tasks for seed in args.seeds]
    peer_results, peers_at_once = peers(pairs, args)
    for task, seed in pairs:
        p = peer_results[(task, seed)]
        load = float(open("/proc/loadavg").read().split()[0])
        if args.peers_only:
            print(f"| {task} | {seed} | {p['return']:.1f} / {p['wall_s']:.1f} s / {p['env_steps_per_s']:,} | "
                  f"not run | - | {load} |", flush=True)
            results.append({"task": task, "seed": seed, "cleanrl": p, "tandem": None, "wall_ratio": None, "load": load})
            continue
        t = ours(args.config.format(task=task), task, seed, round(p["return"], 1), args.cap, args.set)
        ratio = p["wall_s"] / t["wall_s"] if t["reached"] else 0.0
        reached = (f"{t['env_steps']:,} / {t['wall_s']:.1f} s" if t["reached"]
                   else f"not reached: {t['return']:.1f} at {t['env_steps']:,} / {t['wall_s']:.1f} s")
        print(f"| {task} | {seed} | {p['return']:.1f} / {p['wall_s']:.1f} s / {p['env_steps_per_s']:,} | "
              f"{reached} | {ratio:.1f}x | {load} |", flush=True)
        results.append({"task": task, "seed": seed, "cleanrl": p, "tandem": t, "wall_ratio": round(ratio, 2),
                        "load": load})
    line = json.dumps({"bench": "mujoco_vs_cleanrl", "budget": args.budget, "window": WINDOW,
                       "peers_at_once": peers_at_once, "cores": os.cpu_count(), "rows": results})
    print(line)
    if args.json:
        with open(args.json, "w") as f:
            f.write(line + "\n")
    if args.svg:
        svg(results, args.svg)


if __name__ == "__main__":
    try:
        main()
    except RunFailed as e:
        sys.exit(f"mujoco_vs_cleanrl: {e}")
