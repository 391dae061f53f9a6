"""tandem.job(): a Python program's row in a job's control block, as the launcher and `tandem status` see it."""

import json
import os
import subprocess
import sys
import time

import pytest

import tandem
from helpers import Peer, child_line, python_child, status

RUNNING, STOPPING = 2, 3


def test_outside_a_job_tandem_job_says_so_in_one_line(monkeypatch):
    monkeypatch.delenv("TANDEM_JOB", raising=False)
    assert not tandem.in_job()
    with pytest.raises(tandem.NotInJobError) as e:
        tandem.job()
    assert "TANDEM_JOB is not set" in str(e.value) and "\n" not in str(e.value)


def test_a_python_program_in_a_job_reports_like_the_built_in_programs(name, tmp_path):
    with Peer("control", "--job", name, "--learners", 1, "--actors", 1, "--run-dir", tmp_path) as ctl:
        ctl.line()
        ctl.send("restarts 1 2")  # as the launcher does before respawning actor 0 for the second time
        ctl.line()
        child = python_child("""
            import sys, time, tandem
            with tandem.job() as job:
                print(job.id, job.role, job.index, job.name, job.run_dir, job.restarts, flush=True)
                job.report(step=5, loss=0.25, samples=640, samples_per_s=1000.0, version=3, epoch=1)
                job.saw_version(3)
                print("reported", flush=True)
                while not job.should_stop:
                    time.sleep(0.01)
                print("stopping", flush=True)
                sys.stdin.readline()
            print("done", flush=True)
            """, env={"TANDEM_JOB": name, "TANDEM_ROLE": "actor", "TANDEM_INDEX": "0"})
        assert child_line(child).split() == [name, "actor", "0", "actor.0", str(tmp_path), "2"]
        assert child_line(child) == "reported"
        time.sleep(1.2)  # the heartbeat thread beats every 0.5 s
        ctl.send("snapshot 1")
        row = ctl.line()
        assert (row["state"], row["pid"], row["version_seen"]) == (RUNNING, child.pid, 3)
        assert row["heartbeat_age_ms"] < 800
        assert row["metrics"]["step"] == 5 and row["metrics"]["loss"] == 0.25 and row["metrics"]["samples"] == 640

        shown = next(p for p in status(name)["processes"] if p["process"] == "actor.0")
        assert shown["state"] == "running" and shown["step"] == 5 and shown["loss"] == 0.25

        ctl.send("stop")
        ctl.line()
        assert child_line(child) == "stopping"
        child.stdin.write("\n")
        child.stdin.flush()
        assert child_line(child) == "done" and child.wait() == 0
        ctl.send("snapshot 1")
        assert ctl.line()["state"] == STOPPING
        ctl.finish()


def test_with_a_hang_timeout_a_loop_that_stops_ticking_stops_the_heartbeat(name):
    with Peer("control", "--job", name, "--learners", 1, "--actors", 0) as ctl:
        ctl.line()
        with tandem.job(name, "learner", 0, hang_timeout_s=0.3) as job:
            job.tick()
            time.sleep(1.5)   # a hung main loop
            ctl.send("snapshot 0")
            assert ctl.line()["heartbeat_age_ms"] > 700
            for _ in range(20):  # alive again: the next wake of the thread (every 0.5 s) beats
                job.tick()
                time.sleep(0.05)
            ctl.send("snapshot 0")
            assert ctl.line()["heartbeat_age_ms"] < 600
        ctl.finish()


def test_report_names_the_metrics_it_knows_when_given_another(name):
    with Peer("control", "--job", name, "--learners", 1, "--actors", 0) as ctl:
        ctl.line()
        with tandem.job(name, "learner", 0) as job:
            with pytest.raises(tandem.Error, match="no metric 'speed'"):
                job.report(speed=3.0)
        ctl.finish()


def test_report_takes_every_metric_by_name_and_status_and_the_block_show_each(name):
    names = tandem.Job.metric_names
    assert names[:3] == ("step", "version", "samples") and "wait_share" in names
    values = {n: 100 + i for i, n in enumerate(names)}  # each its own; counts and figures both take ints
    with Peer("control", "--job", name, "--learners", 1, "--actors", 0) as ctl:
        ctl.line()
        with tandem.job(name, "learner", 0) as job:
            job.report(**values)
            ctl.send("snapshot 0")
            assert ctl.line()["metrics"] == values
            shown = status(name)["processes"][0]
            assert {n: shown[n] for n in names} == values
        ctl.finish()


def test_a_python_learner_runs_under_tandem_run_and_the_cpp_evaluators_follow_it(fmnist, tmp_path):
    """examples/python/fmnist_learner.py as run.learner_program: the C++ actors check its model signature
    and evaluate its versions; the job succeeds and its metrics log holds the Python learner's rows."""
    root = os.environ.get("TANDEM_SOURCE_ROOT", ".")
    sets = {"data.name": f'"{fmnist.name}"', "learner.steps": "20", "learner.warmup_steps": "0", "learner.publish_every_steps": "10",
            "learner.report_every_steps": "5", "run.actors": "1", "run.status": '"plain"', "run.dashboard": "false",
            "run.learner_program": f'"{sys.executable}"',
            "run.learner_args": f'"{root}/examples/python/fmnist_learner.py"', "run.runs_dir": f'"{tmp_path}"'}
    args = [a for k, v in sets.items() for a in ("--set", f"{k}={v}")]
    run = subprocess.run([os.environ.get("TANDEM_BINARY", "build/tools/tandem"), "run", *args], capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "python learner: finished at step 20" in run.stdout and "succeeded" in run.stdout
    evals = [json.loads(line) for d in tmp_path.iterdir() for line in open(d / "eval.jsonl")]
    assert evals and max(e["version"] for e in evals) >= 2
    rows = [json.loads(line) for d in tmp_path.iterdir() for line in open(d / "metrics.jsonl")]
    assert any(r.get("process") == "learner.0" and r.get("step") == 20 for r in rows)
