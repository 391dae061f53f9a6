#!/usr/bin/env python3
"""The DDP workload at full size in one command: the same DDP script (examples/python/ddp_pde.py, 2 ranks
under `tandem run`, examples/ddp-pde.toml) fed by tandem.HostFeed from the dataset cache, by tensors
already in each rank's memory (the upper bound), and by a Dataset + DataLoader over the .npy files
(the baseline) at several worker counts, for a light and a heavy model; then one rank SIGKILLed.

    /usr/bin/python3 bench/python/bench_ddp_pde.py                 # full size: 1.0 GiB dataset
    /usr/bin/python3 bench/python/bench_ddp_pde.py --samples 65536 --steps 40,20 --repeat 1   # a quick look
    python3 bench/python/bench_ddp_pde.py --device cuda --global-batch 2048 --tandem build-gpu/tools/tandem
                                                   # one GPU per rank, NCCL, tandem.DeviceFeed

It writes the dataset (make_pde_dataset.py) unless --dir already holds one of --samples, preloads
it into /dev/shm/tandem.data.<--cache> (`tandem data preload --force`, as before any job on a
node), runs every variant --repeat times interleaved, each repeat in a rotated order (so a change in
the machine's load hits them all), and prints the median samples/s, the ratios the targets are stated in, and the memory: PSS
summed over the ranks and their DataLoader workers, with the cache counted whole. --json FILE keeps
every run's result. The launcher itself (and torchrun's agent, for a torchrun baseline) is left out.
"""
import argparse
import json
import os
import pathlib
import re
import signal
import statistics
import subprocess
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]
CONFIG = ROOT / "examples" / "ddp-pde.toml"
GIB = 2**30


def variants(workers, memory_workers):
    out = [("tandem", "--data tandem"), ("memory", "--data memory")]
    out += [(f"loader-mmap-w{w}", f"--data loader --load mmap --workers {w}") for w in workers]
    # Files read whole by each worker: the memory growth with ranks x workers (slower to start, so one count).
    out += [(f"loader-read-w{w}", f"--data loader --load memory --workers {w}") for w in memory_workers]
    return out


def prepare(a):
    y = a.dir / "y_train.npy"
    if not y.is_file() or np.load(y, mmap_mode="r").shape[0] != a.samples:
        print(f"bench: writing {a.samples} samples to {a.dir}", flush=True)
        subprocess.run([sys.executable, ROOT / "examples/python/make_pde_dataset.py", a.dir, "--samples",
                        str(a.samples)], check=True)
    t = time.perf_counter()
    subprocess.run([a.tandem, "data", "preload", a.cache, "--from", a.dir, "--force"], check=True,
                   stdout=subprocess.DEVNULL)
    print(f"bench: preloaded /dev/shm/tandem.data.{a.cache} "
          f"({os.stat(f'/dev/shm/tandem.data.{a.cache}').st_size / GIB:.2f} GiB) in {time.perf_counter() - t:.1f} s",
          flush=True)


def job_command(a, run_name, script_args, steps, ranks, extra=()):
    args = (f"examples/python/ddp_pde.py {script_args} --device {a.device} --global-batch {a.global_batch} "
            f"--steps {steps} --warmup {a.warmup} --out {{run_dir}}/result.json")
    sets = {"run.job": f'"{run_name}"', "run.learners": str(ranks), "run.learner_args": f'"{args}"',
            "run.learner_program": f'"{sys.executable}"',  # the ranks run under this bench's interpreter
            "run.runs_dir": f'"{a.runs_dir}"', "run.status": '"off"', "run.dashboard": "false",
            "data.name": f'"{a.cache}"', "data.from": f'"{a.dir}"'}
    cmd = [str(a.tandem), "run", str(CONFIG)]
    for key, value in list(sets.items()) + list(extra):
        cmd += ["--set", f"{key}={value}"]
    return cmd


def env(a):
    e = dict(os.environ)
    e["PYTHONPATH"] = f"{a.tandem.resolve().parent.parent / 'python'}:{e.get('PYTHONPATH', '')}"  # its build's package
    return e


def run_variant(a, name, script_args, model, steps, ranks):
    load_before = os.getloadavg()[0]
    proc = subprocess.run(job_command(a, f"pde-{name}-{model}", f"{script_args} --model {model}", steps, ranks),
                          cwd=ROOT, env=env(a), capture_output=True, text=True)
    found = re.findall(r"ddp_pde: result (\{.*\})", proc.stdout)
    if proc.returncode != 0 or not found:
        sys.exit(f"bench: {name} {model} failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}{proc.stderr[-2000:]}")
    r = json.loads(found[-1])
    r.update(variant=name, load_before=load_before, load_after=os.getloadavg()[0])
    print(f"bench: {model:5} {name:18} {r['samples_per_s']:8.0f} samples/s  {r['cpu_ms_per_sample']:6.3f} CPU-ms/sample"
          f"  waiting {100 * r['data_wait_fraction']:4.1f}%"
          f"  memory {r['memory_bytes'] / GIB:5.2f} GiB"
          + (f" (GPU {'+'.join(f'{b / GIB:.2f}' for b in r['gpu_memory_bytes'])} GiB)" if a.device == "cuda" else "") +
          f"  loss {r['first_loss']:.4f} -> {r['last_loss']:.4f}  load {load_before:.1f}", flush=True)
    return r


def kill_a_rank(a):
    """SIGKILL rank 1 mid-training: how long until `tandem run` fails, what it names, what is left."""
    job = "pde-kill"
    cmd = job_command(a, job, "--data tandem --model light", 100000, 2, [("run.status", '"plain"')])
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env(a), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    pid, lines = None, []
    for line in proc.stdout:
        lines.append(line)
        m = re.search(r"ddp_pde: rank 1/2 pid (\d+)", line)
        pid = int(m.group(1)) if m else pid
        if pid and "ddp_pde: step 20 " in line:
            break
    killed = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    lines += proc.stdout.readlines()
    code = proc.wait()
    seconds = time.monotonic() - killed
    left = sorted(n for n in os.listdir("/dev/shm") if n.startswith(f"tandem.{job}"))
    named = [l.strip() for l in lines if "learner.1" in l and ("fail" in l or "killed" in l or "signal" in l)]
    print(f"bench: rank 1 (pid {pid}) SIGKILLed: tandem run exited {code} after {seconds:.1f} s; "
          f"left in /dev/shm: {left or 'nothing'}", flush=True)
    for l in named[:3]:
        print(f"bench:   {l}", flush=True)
    return dict(exit_code=code, seconds=seconds, shm_left=left, lines=named[:5])


def summary(results, models):
    print("\nbench: medians; CPU-ms/sample = CPU time of the ranks and their workers per sample; waiting = share of the timed window the slowest rank waited for batches; memory = PSS of "
          "the ranks and their workers, the cache counted whole")
    out = {}
    for model in models:
        rows = {}
        for r in results:
            if r["model"] == model:
                rows.setdefault(r["variant"], []).append(r)
        med = {v: statistics.median(x["samples_per_s"] for x in rs) for v, rs in rows.items()}
        mem = {v: statistics.median(x["memory_bytes"] for x in rs) for v, rs in rows.items()}
        cpu = {v: statistics.median(x["cpu_ms_per_sample"] for x in rs) for v, rs in rows.items()}
        wait = {v: statistics.median(x["data_wait_fraction"] for x in rs) for v, rs in rows.items()}
        loaders = {v: s for v, s in med.items() if v.startswith("loader")}
        best = max(loaders, key=loaders.get) if loaders else None
        for v in med:
            print(f"  {model:5} {v:18} {med[v]:8.0f} samples/s  {cpu[v]:6.3f} CPU-ms/sample  waiting {100 * wait[v]:4.1f}%  {mem[v] / GIB:5.2f} GiB")
        line = f"  {model:5} samples/s: tandem / memory = {med['tandem'] / med['memory']:.2f}"
        if best:
            line += (f", tandem / best DataLoader ({best}) = {med['tandem'] / med[best]:.2f}; CPU per sample: "
                     f"{best} / tandem = {cpu[best] / cpu['tandem']:.2f}, memory / tandem = {cpu['memory'] / cpu['tandem']:.2f}")
        print(line)
        out[model] = dict(median=med, cpu_ms_per_sample=cpu, memory=mem, data_wait_fraction=wait, best_loader=best)
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dir", type=pathlib.Path, default=ROOT / "data" / "pde")
    p.add_argument("--samples", type=int, default=524288, help="training samples (524288: 1.0 GiB)")
    p.add_argument("--cache", default="pde")
    p.add_argument("--tandem", type=pathlib.Path, default=ROOT / "build" / "tools" / "tandem")
    p.add_argument("--runs-dir", type=pathlib.Path, default=ROOT / "runs" / "bench-ddp-pde")
    p.add_argument("--models", default="light,heavy")
    p.add_argument("--steps", default="160,26", help="steps per run, per model in --models order")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--workers", default="0,2,4", help="DataLoader workers per rank")
    p.add_argument("--read-workers", default="4", help="DataLoader workers per rank for the variant whose workers "
                   "read the files whole (np.load without mmap); empty: none")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="cuda: rank r on GPU r, NCCL")
    p.add_argument("--global-batch", type=int, default=256, help="samples per step, all ranks together")
    p.add_argument("--no-kill", action="store_true", help="skip the SIGKILLed-rank case")
    p.add_argument("--json", type=pathlib.Path)
    a = p.parse_args()
    if not a.tandem.is_file():
        sys.exit(f"bench: {a.tandem} does not exist: build it (ninja -C build tools/tandem) or pass --tandem")
    a.dir, a.runs_dir = a.dir.resolve(), a.runs_dir.resolve()
    models = a.models.split(",")
    steps = dict(zip(models, (int(s) for s in a.steps.split(","))))
    workers = [int(w) for w in a.workers.split(",") if w]
    print(f"bench: {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}, {time.strftime('%Y-%m-%d %H:%M')}", flush=True)
    prepare(a)
    results = []
    order = variants(workers, [int(w) for w in a.read_workers.split(",") if w])
    for repeat in range(a.repeat):
        for model in models:
            # Each repeat starts at another variant: the one after the 8 GiB loader-read run (the kernel
            # freeing its memory) or first after the preload is not always the same one.
            for name, script_args in order[repeat % len(order):] + order[:repeat % len(order)]:
                results.append(run_variant(a, name, script_args, model, steps[model], a.ranks))
    report = dict(summary=summary(results, models), runs=results)
    if not a.no_kill:
        report["kill"] = kill_a_rank(a)
    if a.json:
        a.json.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
