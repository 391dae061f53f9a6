#!/usr/bin/env python3
"""Learning curves of an RL config, measured the way papers report them: `tandem run CONFIG` for a budget
of env steps with several seeds, then per seed and as the mean over seeds the training return at the
budget and at named checkpoints, the best training return, the evaluators' greedy returns, the wall
time and env steps/s; beside them the published figures for the task (ANCHORS) and our gap to each.
Run from the repository root after building (./tools/dev/build build):

    /usr/bin/python3 bench/python/learning_curves.py examples/mujoco-hopper.toml --steps 1000000 \\
        --seeds 0 1 2 --parallel 3 --at 300000 1000000 --md H.md --json H.json --svg H.svg

The training return is the learner's own: the mean of the last 100 finished training episodes (raw
rewards, actions sampled), its `episode_return` in the run's metrics.jsonl, whose rows come every
run.metrics_interval_s (1 s; a run of seconds wants --set run.metrics_interval_s=0.1). "At N" is the row
where the run first passed N env steps. The greedy return is the evaluators' (eval.jsonl): the last
version's and the best. Wall seconds count from the launch of `tandem run` (start-up included); env
steps/s is the rate over the span of the curve (first finished episode to budget: no start-up). Each
seed sets env.seed, model.seed and learner.seed, runs as job <run.job>-seed<N> in <--runs-dir>/seed<N>/
with its console output in tandem.log there, and turns rl.stop_on_return off (the budget is the
measure; --set rl.stop_on_return=true brings it back). A run that fails stops the others and the
driver, naming its log. --draw A.json ... prints the tables and draws --svg again from earlier --json
files (one row of charts each), running nothing.
"""
import argparse
import json
import os
import sys
import time
import tomllib

import numpy as np

import svg_charts
from tandem_jobs import WINDOW, Job, RunFailed, eval_points, learner_curve, resolved_config, run_jobs, toml_string

_CLEANRL = "CleanRL ppo_continuous_action, v4 task, 3 seeds (cleanrl docs/benchmark/ppo_continuous_action.md)"
_SAMPLE_FACTORY = "Sample Factory APPO, v4 task (its MuJoCo model cards; 16 cores + 1 GPU)"


def _cleanrl(ret, spread):
    return ("CleanRL PPO", 1_000_000, ret, spread, _CLEANRL)


def _sample_factory(ret):
    return ("Sample Factory APPO", 10_000_000, ret, None, _SAMPLE_FACTORY)


# Published training returns per task (env.name): who, env steps, return, its +- over seeds (None
# where the source gives none), source.
ANCHORS = {
    "hopper": [_cleanrl(2383, 272), _sample_factory(2793)],
    "walker2d": [_cleanrl(2288, 572), _sample_factory(5488)],
    "halfcheetah": [_cleanrl(1443, 46), _sample_factory(6263)],
    "ant": [_sample_factory(5876)],
    "humanoid": [_cleanrl(716, 49), _sample_factory(5439)],
}
COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf"]


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("config", nargs="?", help="the job's TOML config (an RL learner's)")
    ap.add_argument("--steps", type=int, help="the budget: env steps per run (rl.total_env_steps)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--parallel", type=int, default=1, metavar="K", help="runs at once (a many-core host)")
    ap.add_argument("--at", type=int, nargs="*", default=[], metavar="N", help="checkpoints: env steps")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="passed to every run")
    ap.add_argument("--tandem", default="build/tools/tandem", help="the tandem binary")
    ap.add_argument("--runs-dir", help="where the runs go; default runs/curves-<config>-<time>")
    ap.add_argument("--job", help="the runs' job name before -seed<N>; default the config's run.job")
    ap.add_argument("--md", help="also write the Markdown tables here")
    ap.add_argument("--json", help="write the results and raw curves here")
    ap.add_argument("--svg", help="draw return against env steps and against wall seconds here")
    ap.add_argument("--draw", nargs="+", metavar="JSON", help="run nothing: tables and --svg from these files")
    args = ap.parse_args(argv)
    if args.draw:
        if args.json:
            ap.error("--json keeps a run's results: --draw has none (it reads earlier --json files)")
        return args
    if not args.config or not args.steps or args.steps <= 0:
        ap.error("give a CONFIG and --steps N (env steps per run), or --draw JSON...")
    if not os.path.isfile(args.config):
        ap.error(f"config {args.config} does not exist")
    if not os.access(args.tandem, os.X_OK):
        ap.error(f"{args.tandem} is not an executable: build it (./tools/dev/build build) or give --tandem PATH")
    if len(set(args.seeds)) != len(args.seeds) or min(args.seeds) < 0:
        ap.error(f"--seeds {' '.join(map(str, args.seeds))}: give distinct seeds of 0 or more")
    if args.parallel < 1 or any(n <= 0 for n in args.at):
        ap.error("--parallel and every --at take a whole number above 0")
    return args


def seed_jobs(args):
    """One Job per seed, each with its own job name and runs dir."""
    stem = os.path.splitext(os.path.basename(args.config))[0]
    runs = args.runs_dir or os.path.join("runs", f"curves-{stem}-{time.strftime('%Y%m%d-%H%M%S')}")
    with open(args.config, "rb") as f:
        try:
            base = args.job or tomllib.load(f).get("run", {}).get("job", stem)
        except tomllib.TOMLDecodeError as e:
            sys.exit(f"learning_curves: config {args.config} is not valid TOML ({e}): fix it")
    jobs = []
    for seed in args.seeds:
        runs_dir = os.path.join(runs, f"seed{seed}")
        if os.path.isdir(runs_dir) and os.listdir(runs_dir):
            sys.exit(f"learning_curves: {runs_dir} already holds a run: give a new --runs-dir")
        sets = [f"rl.total_env_steps={args.steps}", "rl.stop_on_return=false", f"env.seed={seed}",
                f"model.seed={seed}", f"learner.seed={seed}", f"run.job={toml_string(f'{base}-seed{seed}')}", *args.set]
        jobs.append(Job(f"seed {seed}", args.tandem, args.config, sets, runs_dir))
    return jobs


def measured(job, seed, steps):
    """A finished seed's raw record: its curve, its evaluations and where they are."""
    run_dir = job.run_dir()
    curve = learner_curve(run_dir)
    if not curve:
        raise RunFailed(f"seed {seed}: no training episode finished within {steps:,} env steps "
                        f"(its log {job.log}): give more --steps")
    return {"seed": seed, "run_dir": run_dir, "log": job.log, "wall_s": job.wall_s,
            "task": resolved_config(run_dir).get("env", {}).get("name", ""), "curve": curve,
            "evals": eval_points(run_dir, job.started_unix)}


def first_past(curve, n):
    """The curve's point [env steps, wall s, return] where it first passed n env steps, or None."""
    return next((p for p in curve if p[0] >= n), None)


def seed_summary(raw, checkpoints):
    """One seed's figures; env steps/s over the span of its curve, so that start-up does not count."""
    curve, evals = raw["curve"], raw["evals"]
    first, last = curve[0], curve[-1]
    return {"seed": raw["seed"], "env_steps": last[0], "return": last[2], "best": max(p[2] for p in curve),
            "at": [first_past(curve, n) for n in checkpoints],
            "greedy": evals[-1][2] if evals else None, "greedy_best": max((e[2] for e in evals), default=None),
            "wall_s": raw["wall_s"],
            "env_steps_per_s": round((last[0] - first[0]) / (last[1] - first[1])) if last[1] > first[1] else None}


def over_seeds(values):
    """(mean, sd) of the values, or None where a seed has none (a checkpoint one run did not pass)."""
    if not values or any(v is None for v in values):
        return None
    return float(np.mean(values)), float(np.std(values, ddof=1)) if len(values) > 1 else 0.0


def summarize(result):
    """Adds the per-seed figures, their means and the anchors' gaps to a result of raw seeds."""
    checkpoints = result["checkpoints"]
    rows = [seed_summary(raw, checkpoints) for raw in result["seeds"]]
    mean = {k: over_seeds([r[k] for r in rows]) for k in ("env_steps", "return", "best", "greedy", "greedy_best",
                                                          "wall_s", "env_steps_per_s")}
    mean["at"] = [(over_seeds([r["at"][i] and r["at"][i][2] for r in rows]),
                   over_seeds([r["at"][i] and r["at"][i][1] for r in rows])) for i in range(len(checkpoints))]
    anchors = []
    for who, steps, ret, spread, source in ANCHORS.get(result["task"], []):
        ours = over_seeds([(first_past(raw["curve"], steps) or [None] * 3)[2] for raw in result["seeds"]])
        anchors.append({"who": who, "env_steps": steps, "return": ret, "spread": spread, "source": source,
                        "ours": ours, "gap": round(ours[0] - ret, 1) if ours else None})
    return dict(result, rows=rows, mean=mean, anchors=anchors)


def fmt(v, spread=None, places=1):
    if v is None:
        return "-"
    return f"{v:,.{places}f}" + (f" ± {spread:,.{places}f}" if spread else "")


def fmt_mean(ms, places=1):
    return "-" if ms is None else fmt(*ms, places=places)


def tables(s):
    """The Markdown of one summarized result: the seeds and their mean, then the anchors."""
    greedy = any(raw["evals"] for raw in s["seeds"])
    head = ["seed", "env steps", f"return at {s['steps']:,}", "best return"]
    head += ["greedy: last", "greedy: best"] if greedy else []
    for n in s["checkpoints"]:
        head += [f"return at {n:,}", f"wall s to {n:,}"]
    head += ["wall s", "env steps/s"]

    def line(cells):
        return "| " + " | ".join(cells) + " |"

    out = [f"**{s['config']}** (task {s['task'] or '?'}): {len(s['seeds'])} seeds, {s['steps']:,} env steps each; "
           f"return = mean of the last {WINDOW} training episodes", "", line(head), line(["---"] * len(head))]
    for r in s["rows"]:
        cells = [str(r["seed"]), fmt(r["env_steps"], places=0), fmt(r["return"]), fmt(r["best"])]
        cells += [fmt(r["greedy"]), fmt(r["greedy_best"])] if greedy else []
        for p in r["at"]:
            cells += [fmt(p and p[2]), fmt(p and p[1])]
        out.append(line(cells + [fmt(r["wall_s"]), fmt(r["env_steps_per_s"], places=0)]))
    m = s["mean"]
    cells = ["mean ± sd", fmt_mean(m["env_steps"], 0), fmt_mean(m["return"]), fmt_mean(m["best"])]
    cells += [fmt_mean(m["greedy"]), fmt_mean(m["greedy_best"])] if greedy else []
    for ret, wall in m["at"]:
        cells += [fmt_mean(ret), fmt_mean(wall)]
    out.append(line(cells + [fmt_mean(m["wall_s"]), fmt_mean(m["env_steps_per_s"], 0)]))
    if s["anchors"]:
        out += ["", line(["published", "env steps", "its return", "ours (mean ± sd)", "gap (ours - it)"]),
                line(["---"] * 5)]
        for a in s["anchors"]:
            end = min(r["env_steps"] for r in s["rows"])
            ours = fmt_mean(a["ours"]) if a["ours"] else f"not reached (runs end at {end:,})"
            out.append(line([a["who"], f"{a['env_steps']:,}", fmt(a["return"], a["spread"], 0), ours,
                             "-" if a["gap"] is None else f"{a['gap']:+,.1f}"]))
        sources = {a["who"]: a["source"] for a in s["anchors"]}
        out += [""] + [f"- {who}: {source}" for who, source in sources.items()]
    return "\n".join(out) + "\n"


def mean_curve(curves, axis):
    """The mean over seeds of return against axis 0 (env steps) or 1 (wall s), on 200 points where every
    seed has a value; [] with fewer than two seeds."""
    if len(curves) < 2:
        return []
    lo, hi = max(c[0][axis] for c in curves), min(c[-1][axis] for c in curves)
    if hi <= lo:
        return []
    grid = np.linspace(lo, hi, 200)
    ys = np.mean([np.interp(grid, [p[axis] for p in c], [p[2] for p in c]) for c in curves], axis=0)
    return list(zip(grid.tolist(), ys.tolist()))


def charts(s, y0, w, h):
    """The two charts of one result: return against env steps (with the anchors) and against wall s."""
    out = []
    for col, (axis, xlabel) in enumerate(((0, "env steps"), (1, "wall seconds"))):
        lines = [svg_charts.line(COLORS[i % len(COLORS)], [(p[axis], p[2]) for p in raw["curve"]],
                                 kind=f"seed seed-{raw['seed']}") for i, raw in enumerate(s["seeds"])]
        mean = mean_curve([raw["curve"] for raw in s["seeds"]], axis)
        lines += [svg_charts.line("black", mean, width=2.5, opacity=1, kind="mean")] if mean else []
        dots = [svg_charts.dot(e[axis], e[2], COLORS[i % len(COLORS)], kind=f"greedy seed-{raw['seed']}")
                for i, raw in enumerate(s["seeds"]) for e in raw["evals"]]
        markers, beyond = [], []
        if axis == 0:
            xmax = max(p[0] for raw in s["seeds"] for p in raw["curve"] + raw["evals"])
            for a in s["anchors"]:
                label = f"{a['who']} at {a['env_steps']:,}: {fmt(a['return'], a['spread'], 0)}"
                if a["env_steps"] <= xmax * 1.02:
                    markers.append(svg_charts.marker(a["env_steps"], a["return"], label, spread=a["spread"]))
                else:
                    beyond.append(label)
        title = f"{s['task'] or s['config']}: training return (last {WINDOW} episodes)"
        out.append(svg_charts.chart(col * w, y0, w, h, title, xlabel, lines=lines, dots=dots, markers=markers,
                                    note="beyond the axis: " + "; ".join(beyond) if beyond else ""))
    return out


def svg(results, path):
    w, h = 560, 320
    legend = [(COLORS[i % len(COLORS)], f"seed {raw['seed']}") for i, raw in enumerate(results[0]["seeds"])]
    legend += [("#555", "thin: a seed's training return"), ("black", "thick: their mean")]
    evaluated = any(raw["evals"] for s in results for raw in s["seeds"])
    legend += [("#555", "dots: greedy return (evaluators)")] if evaluated else []
    legend += [("black", "diamonds: published figures")] if any(s["anchors"] for s in results) else []
    body = [c for row, s in enumerate(results) for c in charts(s, 30 + row * h, w, h)]
    svg_charts.write(path, svg_charts.page(2 * w, 30 + len(results) * h, legend, body))


def run(args):
    jobs = seed_jobs(args)
    print(f"learning_curves: {len(jobs)} runs of {args.config}, {args.steps:,} env steps each, "
          f"{args.parallel} at once, in {os.path.dirname(jobs[0].runs_dir)}", flush=True)
    load = float(open("/proc/loadavg").read().split()[0])
    run_jobs(jobs, args.parallel)
    seeds = [measured(job, seed, args.steps) for job, seed in zip(jobs, args.seeds)]
    return {"bench": "learning_curves", "config": args.config, "task": seeds[0]["task"], "steps": args.steps,
            "checkpoints": sorted(args.at), "sets": args.set, "parallel": args.parallel, "cores": os.cpu_count(),
            "load": load, "window": WINDOW, "seeds": seeds}


def main(argv):
    args = parse_args(argv)
    if args.draw:
        raws = []
        for path in args.draw:
            with open(path) as f:
                raws.append(json.load(f))
    else:
        raws = [run(args)]
    results = [summarize(raw) for raw in raws]
    text = "\n".join(tables(s) for s in results)
    print(text, end="", flush=True)
    if args.md:
        with open(args.md, mode="w", encoding="utf-8") as f:
            f.write(text)
    if args.json:
        with open(args.json, mode="w", encoding="utf-8") as f:
            json.dump(results[0], f)
            f.write("\n")
    if args.svg:
        svg(results, args.svg)


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except RunFailed as e:
        sys.exit(f"learning_curves: {e}")
