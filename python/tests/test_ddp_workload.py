"""The DDP workload at small size: a user's torch DDP script (examples/python/ddp_pde.py) on 2 learner
ranks under `tandem run` (examples/ddp-pde.toml), fed by tandem.HostFeed from a dataset cache
preloaded before the ranks start; the same job with one rank SIGKILLed; and on GPUs over NCCL, fed by
tandem.DeviceFeed."""

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
import torch

import tandem
from helpers import ROOT, SESSION, read_line

TANDEM = os.environ.get("TANDEM_BINARY", str(ROOT / "build/tools/tandem"))


@pytest.fixture(scope="module")
def pde_cache(tmp_path_factory):
    """A tiny PDE dataset (4096 samples of 64 points), preloaded as the job would find it."""
    d = tmp_path_factory.mktemp("pde")
    subprocess.run([sys.executable, ROOT / "examples/python/make_pde_dataset.py", d, "--samples", "4096", "--test",
                    "0", "--points", "64"], check=True, capture_output=True)
    name = f"{SESSION}-pde"
    tandem.preload(name, str(d), progress=False).close()
    yield name
    tandem.remove_dataset(name)


def job_command(job, cache, run_dir, steps, extra_args="", extra_sets=()):
    args = f"examples/python/ddp_pde.py --data tandem --model light {extra_args}"
    sets = {"run.job": f'"{job}"', "run.unique_id": "false", "run.runs_dir": f'"{run_dir}"', "run.status": '"plain"',
            "run.dashboard": "false", "run.metrics_interval_s": "0.1", "run.learner_args": f'"{args}"',
            "run.learner_program": f'"{sys.executable}"',  # the interpreter running these tests has the package
            "data.name": f'"{cache}"', "supervised.batch_size": "64", "supervised.steps": str(steps),
            "learner.report_every_steps": "5"}
    cmd = [TANDEM, "run", str(ROOT / "examples/ddp-pde.toml")]
    for key, value in list(sets.items()) + list(extra_sets):
        cmd += ["--set", f"{key}={value}"]
    return cmd


def job_env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in [os.environ.get("PYTHONPATH"), str(ROOT / "build/python")] if p)
    return env


def job_segments(job):
    return sorted(n for n in os.listdir("/dev/shm") if n.startswith(f"tandem.{job}."))


def run_script_with(args, local_ranks):
    """The script's start under torchrun-like variables, where a device choice is refused or taken."""
    env = dict(job_env(), RANK="0", WORLD_SIZE=str(local_ranks), LOCAL_RANK="0", LOCAL_WORLD_SIZE=str(local_ranks),
               MASTER_ADDR="127.0.0.1", MASTER_PORT="1")
    return subprocess.run([sys.executable, ROOT / "examples/python/ddp_pde.py", *args], env=env, capture_output=True,
                          text=True, timeout=60)


def test_the_script_takes_the_learner_device_spellings_and_refuses_others_in_one_line():
    bad = run_script_with(["--device", "gpu0"], 1)
    assert bad.returncode == 2 and "'gpu0' is not cpu, cuda or cuda:N" in bad.stderr
    # cuda:N names one GPU: two ranks on this node cannot both have it (checked before any GPU is needed).
    shared = run_script_with(["--device", "cuda:1"], 2)
    assert shared.returncode == 1
    assert shared.stderr.strip().splitlines()[-1] == (
        "ddp_pde: --device cuda:1 names one GPU for this node's 2 ranks: use --device cuda (each rank on GPU LOCAL_RANK)")
    if not torch.cuda.is_available():
        alone = run_script_with(["--device", "cuda:0"], 1)
        assert alone.returncode == 1
        assert alone.stderr.strip().splitlines()[-1] == (
            "ddp_pde: --device cuda:0 but this torch sees no GPU: run with --device cpu")


def test_two_ddp_ranks_train_from_the_cache_under_tandem_run(pde_cache, tmp_path):
    job = f"{SESSION}-ddp"
    p = subprocess.run(job_command(job, pde_cache, tmp_path, 60, "--lr 0.01"), cwd=ROOT, env=job_env(),
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    losses = [float(v) for v in re.findall(r"\[learner\.0\] ddp_pde: step \d+ loss ([0-9.]+)", p.stdout)]
    # Means of the first and last reports (5 steps each): single batches of 32 are noisy.
    assert len(losses) == 12 and sum(losses[-3:]) < sum(losses[:3]), p.stdout[-3000:]
    for rank in (0, 1):
        assert f"[learner.{rank}] ddp_pde: rank {rank} finished at step 60" in p.stdout, p.stdout[-3000:]
    rows = [json.loads(l) for l in open(tmp_path / job / "metrics.jsonl")]
    for rank in (0, 1):
        steps = [r["step"] for r in rows if r.get("process") == f"learner.{rank}" and "step" in r]
        assert steps and max(steps) == 60, f"learner.{rank}: {steps}"
        assert any(r.get("loss", 0) > 0 for r in rows if r.get("process") == f"learner.{rank}")
    assert job_segments(job) == []


def test_a_ddp_rank_killed_fails_the_job_within_10_s_naming_it(pde_cache, tmp_path):
    job = f"{SESSION}-ddp-kill"
    p = subprocess.Popen(job_command(job, pde_cache, tmp_path, 1000000), cwd=ROOT, env=job_env(),
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        pid, deadline = None, time.monotonic() + 240
        while True:  # until rank 1 has trained a few steps
            line = read_line(p, max(1.0, deadline - time.monotonic()))
            assert line is not None, "tandem run ended before rank 1 trained"
            m = re.search(r"ddp_pde: rank 1/2 pid (\d+)", line)
            pid = int(m.group(1)) if m else pid
            if pid and "ddp_pde: step 10 " in line:
                break
        os.kill(pid, signal.SIGKILL)
        killed = time.monotonic()
        rest = []
        while (line := read_line(p, 30)) is not None:
            rest.append(line)
        code = p.wait(30)
        seconds = time.monotonic() - killed
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    output = "\n".join(rest)
    assert code != 0, output
    assert seconds < 10, f"the job took {seconds:.1f} s to fail:\n{output}"
    assert re.search(rf"job {job} failed .*learner\.1 \(pid {pid}\) was killed by SIGKILL", output), output
    assert job_segments(job) == []


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU and a torch with CUDA")
def test_ddp_ranks_on_gpus_train_over_nccl_from_a_device_feed(pde_cache, tmp_path):
    job, ranks = f"{SESSION}-ddp-gpu", min(2, torch.cuda.device_count())  # NCCL takes one GPU per rank
    command = job_command(job, pde_cache, tmp_path, 60, "--lr 0.01 --device cuda", [("run.learners", str(ranks))])
    p = subprocess.run(command, cwd=ROOT, env=job_env(), capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    for rank in range(ranks):
        assert re.search(rf"\[learner\.{rank}\] ddp_pde: rank {rank}/{ranks} .* from tandem\.DeviceFeed over "
                         rf"/dev/shm/tandem\.data\.{pde_cache} on cuda:{rank}", p.stdout), p.stdout[-3000:]
        assert f"[learner.{rank}] ddp_pde: rank {rank} finished at step 60" in p.stdout, p.stdout[-3000:]
    losses = [float(v) for v in re.findall(r"\[learner\.0\] ddp_pde: step \d+ loss ([0-9.]+)", p.stdout)]
    assert len(losses) == 12 and sum(losses[-3:]) < sum(losses[:3]), p.stdout[-3000:]
    assert job_segments(job) == []
