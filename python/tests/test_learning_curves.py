"""bench/python/learning_curves.py: seeds of an RL config run side by side, their returns as a table, JSON
and an SVG; the published anchors of a task drawn from an earlier JSON (--draw); a failed run named."""

import json
import os
import pathlib
import subprocess
import sys
import time
import tomllib
import xml.etree.ElementTree as ET

from helpers import ROOT

DRIVER = ROOT / "bench/python/learning_curves.py"
TANDEM = os.environ.get("TANDEM_BINARY", str(ROOT / "build/tools/tandem"))
SVG = "{http://www.w3.org/2000/svg}"


def drive(*args):
    return subprocess.run([sys.executable, str(DRIVER), *map(str, args)], capture_output=True, text=True, timeout=600)


def classes(svg, tag):
    """The class attribute of each `tag` element of the SVG file."""
    return [e.get("class", "") for e in ET.parse(svg).getroot().iter(SVG + tag)]


def test_two_cartpole_seeds_side_by_side_give_a_table_a_json_and_one_curve_per_seed(name, tmp_path):
    # Metric rows every 0.1 s rather than 1 s: a curve of several points within a run of seconds.
    out = drive(ROOT / "examples/cartpole-ppo.toml", "--steps", 20000, "--seeds", 0, 1, "--parallel", 2,
                "--at", 4000, "--set", "run.metrics_interval_s=0.1", "--tandem", TANDEM,
                "--runs-dir", tmp_path / "runs", "--job", name,
                "--md", tmp_path / "t.md", "--json", tmp_path / "r.json", "--svg", tmp_path / "c.svg")
    assert out.returncode == 0, out.stdout + out.stderr
    table = (tmp_path / "t.md").read_text()
    assert table in out.stdout
    assert table.count("| seed | env steps | return at 20,000 | best return | greedy: last | greedy: best | "
                       "return at 4,000 | wall s to 4,000 | wall s | env steps/s |") == 1
    assert "| 0 | " in table and "| 1 | " in table and "| mean ± sd | " in table
    assert "published" not in table  # cartpole has no anchors

    r = json.loads((tmp_path / "r.json").read_text())
    assert r["task"] == "cartpole" and r["anchors"] == [] and [s["seed"] for s in r["seeds"]] == [0, 1]
    for raw, row in zip(r["seeds"], r["rows"]):
        config = tomllib.loads((pathlib.Path(raw["run_dir"]) / "config.toml").read_text())
        assert config["env"]["seed"] == config["model"]["seed"] == config["learner"]["seed"] == raw["seed"]
        assert config["rl"]["total_env_steps"] == 20000 and config["run"]["job"] == f"{name}-seed{raw['seed']}"
        steps = [p[0] for p in raw["curve"]]
        assert steps == sorted(steps) and steps[-1] >= 20000 and row["env_steps"] == steps[-1]
        assert row["return"] == raw["curve"][-1][2] and row["best"] == max(p[2] for p in raw["curve"])
        (s0, t0, _), (s1, t1, _) = raw["curve"][0], raw["curve"][-1]
        assert row["env_steps_per_s"] == round((s1 - s0) / (t1 - t0)) and t1 <= raw["wall_s"]
        assert row["at"][0][0] >= 4000 and row["at"][0] == next(p for p in raw["curve"] if p[0] >= 4000)
        assert raw["evals"] and row["greedy"] == raw["evals"][-1][2]  # the config has an evaluator
    assert r["seeds"][0]["run_dir"] != r["seeds"][1]["run_dir"]
    mean, sd = r["mean"]["return"]
    assert abs(mean - sum(row["return"] for row in r["rows"]) / 2) < 1e-9 and sd >= 0

    lines = classes(tmp_path / "c.svg", "polyline")  # two charts: against env steps, against wall seconds
    assert sorted(lines) == ["mean", "mean", "seed seed-0", "seed seed-0", "seed seed-1", "seed seed-1"]
    assert {c for c in classes(tmp_path / "c.svg", "circle")} == {"greedy seed-0", "greedy seed-1"}
    assert "marker" not in classes(tmp_path / "c.svg", "path")


def flat_curve(ret, to_steps):
    return [[s, s / 1000, ret] for s in range(10_000, to_steps + 1, 10_000)]


def test_draw_puts_the_published_hopper_figures_on_the_chart_and_their_gaps_in_the_table(tmp_path):
    seeds = [{"seed": s, "run_dir": "", "log": "", "wall_s": 1300.0, "curve": flat_curve(ret, 1_200_000), "evals": []}
             for s, ret in ((0, 2000.0), (1, 2100.0))]
    (tmp_path / "h.json").write_text(json.dumps({"config": "examples/mujoco-hopper.toml", "task": "hopper",
                                                 "steps": 1_200_000, "checkpoints": [], "seeds": seeds}))
    out = drive("--draw", tmp_path / "h.json", "--svg", tmp_path / "h.svg")
    assert out.returncode == 0, out.stdout + out.stderr
    # CleanRL's 1 M figure and ours there (the mean of 2000 and 2100, sd 70.7); Sample Factory's 10 M is past our runs.
    assert "| CleanRL PPO | 1,000,000 | 2,383 ± 272 | 2,050.0 ± 70.7 | -333.0 |" in out.stdout
    assert "| Sample Factory APPO | 10,000,000 | 2,793 | not reached (runs end at 1,200,000) | - |" in out.stdout
    assert "greedy" not in out.stdout  # no evaluators, no greedy columns
    root = ET.parse(tmp_path / "h.svg").getroot()
    assert classes(tmp_path / "h.svg", "path").count("marker") == 1
    texts = [t.text for t in root.iter(SVG + "text")]
    assert "CleanRL PPO at 1,000,000: 2,383 ± 272" in texts
    assert "beyond the axis: Sample Factory APPO at 10,000,000: 2,793" in texts


def test_a_run_that_fails_stops_the_other_runs_and_the_driver_with_one_line_naming_it_and_its_log(name, tmp_path):
    # seed 1's `tandem run` fails a second in; seed 0's run, of hours, must be stopped, not waited for.
    wrapper = tmp_path / "tandem"
    wrapper.write_text(f'#!/bin/sh\ncase "$*" in *env.seed=1*) sleep 1; echo "seed 1 fails"; exit 3;; esac\n'
                       f'exec {TANDEM} "$@"\n')
    wrapper.chmod(0o755)
    started = time.monotonic()
    out = drive(ROOT / "examples/cartpole-ppo.toml", "--steps", 50_000_000, "--seeds", 0, 1, "--parallel", 2,
                "--tandem", wrapper, "--runs-dir", tmp_path / "runs", "--job", name, "--json", tmp_path / "r.json")
    assert out.returncode != 0 and time.monotonic() - started < 120
    log = tmp_path / "runs" / "seed1" / "tandem.log"
    assert out.stderr.strip().splitlines() == [f"learning_curves: seed 1: `tandem run` exited 3: see its log {log}"]
    assert log.read_text() == "seed 1 fails\n" and not (tmp_path / "r.json").exists()
    (seed0,) = (tmp_path / "runs" / "seed0").glob("*/metrics.jsonl")
    assert any(json.loads(line).get("event") == "stop" for line in seed0.open())
