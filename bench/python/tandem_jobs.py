"""`tandem run` jobs for the bench scripts: run them (several side by side on a many-core host), check
how each ended, and read what its run directory recorded.

A run directory, <run.runs_dir>/<job id>/ (docs/RUN.md; tools/run/metrics_log.hpp, run_job.cpp):
  config.toml    the resolved config
  metrics.jsonl  the launcher's events and every process's metric rows, keyed by the names of
                 shm/metric_fields.hpp; time_s counts seconds from the launcher's start, and a measure
                 not taken yet (episode_return before the first episode) is left out of its row
  eval.jsonl     the evaluators' rows (actor/rl_evaluator.hpp): version, step (the learner's step at
                 that version), episode_return (the mean greedy return), unix_s
The launcher exits 0 only when the job succeeded; each job here also keeps its console output in
<runs_dir>/tandem.log, which a failure names.
"""
import json
import math
import os
import signal
import subprocess
import time
import tomllib

import numpy as np

WINDOW = 100  # episodes in the learner's trailing mean (learner/rl's EpisodeWindow)


class RunFailed(Exception):
    """A job exited non-zero; the message is one line naming it and its log."""


def toml_string(text):
    """text as a TOML basic string, for --set (JSON's escapes are TOML's)."""
    return json.dumps(text)


class Job:
    """One `tandem run CONFIG --set ...` with its own runs_dir, so that jobs never share a directory."""

    def __init__(self, name, tandem, config, sets, runs_dir):
        self.name, self.runs_dir = name, os.path.abspath(runs_dir)
        self.log = os.path.join(self.runs_dir, "tandem.log")
        sets = ['run.status="plain"', "run.dashboard=false", f"run.runs_dir={toml_string(self.runs_dir)}", *sets]
        self.cmd = [tandem, "run", config, *(a for kv in sets for a in ("--set", kv))]
        self.proc = None
        self.started_unix = self.wall_s = None

    def start(self):
        os.makedirs(self.runs_dir, exist_ok=True)
        with open(self.log, "w") as log:
            self.started_unix, self._t0 = time.time(), time.perf_counter()
            self.proc = subprocess.Popen(self.cmd, stdout=log, stderr=subprocess.STDOUT)

    def finished(self):
        if self.proc.poll() is None:
            return False
        if self.wall_s is None:
            self.wall_s = round(time.perf_counter() - self._t0, 2)
        return True

    def stop(self):
        """SIGTERM: the launcher's graceful stop (it ends its processes and removes its segments)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait()

    def failure(self):
        code = self.proc.returncode
        how = f"exited {code}" if code > 0 else f"was killed by signal {-code}"
        return f"{self.name}: `tandem run` {how}: see its log {self.log}"

    def run_dir(self):
        """The job's run directory: the one directory under runs_dir holding a metrics.jsonl."""
        dirs = sorted(os.path.join(self.runs_dir, d) for d in os.listdir(self.runs_dir)
                      if os.path.isfile(os.path.join(self.runs_dir, d, "metrics.jsonl")))
        if len(dirs) != 1:
            raise RunFailed(f"{self.name}: {self.runs_dir} holds {len(dirs)} run directories, not one: "
                            f"give each run a runs_dir of its own (log {self.log})")
        return dirs[0]


def run_jobs(jobs, at_once=1):
    """Runs the jobs, at_once of them side by side, and returns them, each finished with exit 0. The
    first that fails stops the others (an interrupt stops them too) and raises RunFailed."""
    pending, running = list(jobs), []
    try:
        while pending or running:
            while pending and len(running) < at_once:
                pending[0].start()
                running.append(pending.pop(0))
            time.sleep(0.2)
            for job in [j for j in running if j.finished()]:
                running.remove(job)
                if job.proc.returncode != 0:
                    raise RunFailed(job.failure())
    finally:
        for job in running:
            job.stop()
    return jobs


def read_rows(path):
    """The JSON objects of a .jsonl file, [] where it does not exist (eval.jsonl of a job without evaluators)."""
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def resolved_config(run_dir):
    with open(os.path.join(run_dir, "config.toml"), "rb") as f:
        return tomllib.load(f)


def _rank0(run_dir):
    return [r for r in read_rows(os.path.join(run_dir, "metrics.jsonl"))
            if r.get("process") == "learner.0" and "event" not in r]


def learner_curve(run_dir):
    """[[env steps, wall s, return]]: the training return (the mean of the last WINDOW episodes, as
    learner rank 0 reports it) at each of its metric rows, from its first finished episode."""
    return [[r["env_steps"], round(r["time_s"], 2), round(r["episode_return"], 1)] for r in _rank0(run_dir)
            if r.get("env_steps") is not None and r.get("episode_return") is not None
            and math.isfinite(r["episode_return"])]


def eval_points(run_dir, started_unix):
    """[[env steps, wall s, greedy return, version]], one per evaluated version (the mean over its
    evaluators). eval.jsonl gives the learner step of a version: its env steps are read off learner
    rank 0's rows (step -> env_steps, interpolated between its samples, which come every
    run.metrics_interval_s); its wall time is when the
    evaluation ended, counted from started_unix (the job's start)."""
    by_version = {}
    for r in read_rows(os.path.join(run_dir, "eval.jsonl")):
        by_version.setdefault(r["version"], []).append(r)
    if not by_version:
        return []
    # Step 0 is 0 env steps (the row leaves env_steps out while it is 0).
    known = [(0, 0)] + sorted((r["step"], r["env_steps"]) for r in _rank0(run_dir) if r.get("env_steps") is not None)
    steps, env_steps = [k[0] for k in known], [k[1] for k in known]
    points = []
    for version, rows in sorted(by_version.items()):
        at = float(np.interp(rows[0]["step"], steps, env_steps))
        points.append([round(at), round(max(r["unix_s"] for r in rows) - started_unix, 2),
                       round(sum(r["episode_return"] for r in rows) / len(rows), 1), version])
    return points
