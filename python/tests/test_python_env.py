"""Python environments for the built-in RL (env.name = "python"): tandem.pyenv reads a Gymnasium-API env
without gymnasium, and examples/python-cartpole-ppo.toml trains one with the C++ PPO learner through the
Python rollout actor (tandem.rollout_actor) under `tandem run`."""

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from helpers import ROOT, SESSION, shm_names, status
from tandem import pyenv

CARTPOLE = "examples.python.envs.cartpole:CartPole"
PENDULUM = "examples.python.envs.pendulum:Pendulum"
TANDEM = os.environ.get("TANDEM_BINARY", str(ROOT / "build/tools/tandem"))


@pytest.fixture(autouse=True)
def from_the_source_root(monkeypatch):
    monkeypatch.chdir(os.environ.get("TANDEM_SOURCE_ROOT", str(ROOT)))  # where examples.* imports from


def probe(name, kwargs="{}"):
    return subprocess.run([sys.executable, str(ROOT / "python/tandem/pyenv.py"), "spec", name, kwargs],
                          capture_output=True, text=True, timeout=60)


def test_the_spec_probe_reads_the_spaces_of_the_example_cartpole():
    out = probe(CARTPOLE, '{"max_episode_steps": 200}')
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"name": CARTPOLE, "obs_dim": 4, "num_actions": 2, "action_dim": 0,
                                      "action_low": 0.0, "action_high": 0.0, "max_episode_steps": 200}


@pytest.mark.parametrize("name, kwargs, says", [
    ("examples.python.envs.nope:CartPole", "{}", "importing examples.python.envs.nope failed"),
    (f"{CARTPOLE}x", "{}", "has no CartPolex"),
    ("cartpole", "{}", "is not module:Class"),
    (CARTPOLE, '{"wheels": 3}', "fix env.kwargs"),
    (CARTPOLE, "[1]", "is not a JSON object"),
])
def test_a_bad_env_is_one_line_naming_it_and_the_fix(name, kwargs, says):
    out = probe(name, kwargs)
    assert out.returncode == 1 and out.stdout == ""
    assert says in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr


class _NoSpaces:
    def reset(self, seed=None):
        return np.zeros(3), {}


class _WrongStep:
    observation_space = type("S", (), {"shape": (3,)})()
    action_space = type("A", (), {"n": 2})()

    def reset(self, seed=None):
        return np.zeros(3), {}

    def step(self, action):
        return np.zeros(3), 1.0, False  # Gymnasium's old 4-tuple API, short one more


class _WrongShape(_WrongStep):
    def step(self, action):
        return np.zeros(5), 1.0, False, False, {}


@pytest.mark.parametrize("cls, says", [(_NoSpaces, "has no observation_space"),
                                       (_WrongStep, "return Gymnasium's five values"),
                                       (_WrongShape, "gave an observation of shape (5,)")])
def test_an_env_that_breaks_the_api_is_named_with_the_fix(monkeypatch, cls, says):
    monkeypatch.setattr(sys.modules[__name__], "Bad", cls, raising=False)
    with pytest.raises(pyenv.EnvError, match="env '.*test_python_env:Bad'") as e:
        vec = pyenv.VecPyEnv(f"{__name__}:Bad", {}, 2, 0)
        vec.step(np.zeros(2, np.int64))
    assert says in str(e.value)


def test_the_vector_env_auto_resets_and_reports_each_finished_episode():
    vec = pyenv.VecPyEnv(CARTPOLE, {"max_episode_steps": 10}, 3, 0)
    finished = []
    for _ in range(10):
        vec.step(np.ones(3, np.int64))
        finished += vec.done_episodes
    assert sorted(i for i, _, _ in finished) == [0, 1, 2]  # all truncated at 10 or ended sooner, once
    assert all(r == n and n <= 10 for _, r, n in finished)


def test_a_python_cartpole_is_trained_by_the_cpp_ppo_learner_under_tandem_run(tmp_path):
    """A short job: the Python actor's slots reach the C++ learner, which updates and publishes versions
    the actor follows; the job succeeds and leaves nothing in /dev/shm."""
    job = f"{SESSION}-pyenv"
    run = start_job(job, tmp_path, **{"rl.total_env_steps": "8192"})
    out, _ = run.communicate(timeout=300)
    assert run.returncode == 0, out
    assert "rollout (python)" in out and "succeeded" in out
    rows = [json.loads(line) for d in tmp_path.iterdir() for line in open(d / "metrics.jsonl")]
    actor = [r for r in rows if r.get("process") == "actor.0" and r.get("env_steps")]
    learner = [r for r in rows if r.get("process") == "learner.0" and r.get("step")]
    assert actor and max(r["env_steps"] for r in actor) >= 8192
    assert learner and max(r["step"] for r in learner) >= 8192 // (32 * 8)  # one update per 256-step slot
    assert max(r.get("version") or 0 for r in actor) >= 2  # it followed the learner's new weights
    assert not [n for n in os.listdir("/dev/shm") if job in n]


def test_a_python_env_that_does_not_import_fails_the_job_before_it_starts(tmp_path):
    before = shm_names()  # other tests' caches may live for the session
    run = subprocess.run([TANDEM, "run", "examples/python-cartpole-ppo.toml", "--set", f'run.runs_dir="{tmp_path}"',
                          "--set", 'env.python="examples.python.envs.nope:CartPole"'], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode != 0 and "importing examples.python.envs.nope failed" in run.stderr + run.stdout
    assert not list(tmp_path.iterdir()) and shm_names() <= before


def start_job(job, tmp_path, *extra_sets, **sets):
    """`tandem run examples/python-cartpole-ppo.toml` in the background, plain status lines on stdout."""
    sets = {"run.job": f'"{job}"', "run.unique_id": "false", "run.runs_dir": f'"{tmp_path}"', "run.status": '"plain"',
            "run.dashboard": "false", "rl.stop_on_return": "false", "env.envs": "8", "learner.report_every_steps": "4", **sets}
    args = [a for k, v in sets.items() for a in ("--set", f"{k}={v}")]
    return subprocess.Popen([TANDEM, "run", "examples/python-cartpole-ppo.toml", *args, *extra_sets],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_a_python_rollout_actor_sigkilled_mid_run_is_restarted_and_the_job_succeeds(tmp_path):
    """The Python actor is actor.0's process (tandem-actor execs it): SIGKILL it once it has filled
    slots; the launcher restarts it, the new one joins the same ring and the run reaches its steps."""
    job = f"{SESSION}-pykill"
    run = start_job(job, tmp_path, **{"rl.total_env_steps": "65536"})
    lines = []
    try:
        for line in run.stdout:
            lines.append(line)
            if "rollout (python)" in line:
                break
        pid = next(p["pid"] for p in status(job)["processes"] if p["process"] == "actor.0")
        time.sleep(0.3)  # a few slots into the ring
        os.kill(pid, signal.SIGKILL)
        lines += run.stdout.readlines()
        run.wait(timeout=300)
    finally:
        if run.poll() is None:
            run.kill()
    out = "".join(lines)
    assert run.returncode == 0, out
    assert f"actor.0 (pid {pid}) was killed by SIGKILL: restarting it" in out and "succeeded" in out
    rows = [json.loads(line) for d in tmp_path.iterdir() for line in open(d / "metrics.jsonl")]
    spawns = [r for r in rows if r.get("event") == "spawn" and r["process"] == "actor.0"]
    assert [r["restarts"] for r in spawns] == [0, 1] and spawns[1]["pid"] != pid
    learner = [r for r in rows if r.get("process") == "learner.0" and r.get("step")]
    assert max(r["step"] for r in learner) >= 65536 // (32 * 8)
    assert not [n for n in os.listdir("/dev/shm") if job in n]


def test_a_continuous_action_python_env_is_trained_by_the_cpp_ppo_learner(tmp_path):
    """examples/python/envs/pendulum.py (a Box action space): the actor samples float actions of its
    shape, the learner updates on them, and the episodes' returns are Pendulum's (always negative)."""
    job = f"{SESSION}-pypend"
    run = start_job(job, tmp_path, **{"rl.total_env_steps": "8192", "env.python": f'"{PENDULUM}"',
                                      "env.kwargs": "'{}'"})
    out, _ = run.communicate(timeout=300)
    assert run.returncode == 0, out
    assert "succeeded" in out
    rows = [json.loads(line) for d in tmp_path.iterdir() for line in open(d / "metrics.jsonl")]
    actor = [r for r in rows if r.get("process") == "actor.0" and r.get("env_steps")]
    learner = [r for r in rows if r.get("process") == "learner.0" and r.get("step")]
    assert actor and max(r["env_steps"] for r in actor) >= 8192 and learner
    returns = [r["episode_return"] for r in rows if r.get("process") == "actor.0" and "episode_return" in r]
    assert returns and all(r < 0 for r in returns)


def test_the_spec_probe_reads_a_box_action_space():
    out = probe(PENDULUM)
    assert out.returncode == 0, out.stderr
    spec = json.loads(out.stdout)
    assert (spec["obs_dim"], spec["num_actions"], spec["action_dim"]) == (3, 0, 1)
    assert (spec["action_low"], spec["action_high"]) == (-2.0, 2.0)
