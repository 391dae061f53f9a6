#!/usr/bin/env python3
"""A user's torch DDP script: a 1-D ConvNet surrogate of an advection-diffusion solver (u0 -> u(T),
examples/python/make_pde_dataset.py), trained on every learner rank with DistributedDataParallel, over
Gloo on CPUs or NCCL on GPUs (--device cuda: each rank on GPU LOCAL_RANK; cuda:N: GPU N, one rank per
node). Under `tandem run` (examples/ddp-pde.toml) it reads its batches from the node's dataset cache:

    tandem data preload pde --from data/pde        # once per node, before the ranks start
    tandem run examples/ddp-pde.toml

The batches come from one of three places (--data), the rest of the script being the same:
  tandem    tandem.HostFeed over the cache /dev/shm/tandem.data.<data.name>: rank shards, a shuffle
            per epoch, gathered by a C++ thread; every rank maps the one copy the node has. On a GPU,
            tandem.DeviceFeed: the rank's split copied once from the cache into GPU memory, each batch
            gathered there by kernels.
  memory    each rank np.load()s the .npy files into its own memory (on a GPU: into GPU memory) and
            slices shuffled batches: the upper bound (no loader at all), one copy per rank.
  loader    a torch Dataset over the .npy files + DistributedSampler + DataLoader(num_workers=W),
            the files opened in each worker, memory-mapped (--load mmap) or read (--load memory),
            on a GPU with pin_memory and a non-blocking copy: what users write today.
It runs under torchrun too (no tandem.job() then): it needs only torchrun's RANK, WORLD_SIZE,
MASTER_ADDR and MASTER_PORT (and LOCAL_RANK on GPUs). Under `tandem run` the defaults come from the
job's config ($TANDEM_CONFIG: data.name, data.from, data.mean, data.std, supervised.batch_size (all
ranks together), supervised.steps, learner.device, learner.seed, learner.threads,
learner.report_every_steps, optimizer.lr) and it reports its metrics row through tandem.job().
--out FILE: rank 0 writes one JSON object with the timed samples/s and the ranks' (and their
workers') memory from /proc/<pid>/smaps_rollup.
"""
import argparse
import contextlib
import json
import os
import pathlib
import re
import sys
import time
import tomllib

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

from pde_data import MEMORY_FIELDS, BadInput, LoaderBatches, MemoryBatches, TandemBatches, check_npy_dir, tree_cpu_seconds, tree_memory

REGIMES = 4  # make_pde_dataset.REGIMES: the label says which (nu, c) the target was solved with


class Surrogate(torch.nn.Module):
    """u0 and the regime (one-hot channels) -> u(T): a residual stack of periodic 1-D convolutions."""

    def __init__(self, width, depth, kernel):
        super().__init__()
        conv = lambda i, o: torch.nn.Conv1d(i, o, kernel, padding=kernel // 2, padding_mode="circular")
        self.lift = conv(1 + REGIMES, width)
        self.blocks = torch.nn.ModuleList(conv(width, width) for _ in range(depth))
        self.project = conv(width, 1)

    def forward(self, u0, regime):
        onehot = F.one_hot(regime, REGIMES).to(u0.dtype)[:, :, None].expand(-1, -1, u0.shape[-1])
        h = F.gelu(self.lift(torch.cat([u0, onehot], 1)))
        for block in self.blocks:
            h = h + F.gelu(block(h))
        return u0[:, 0] + self.project(h)[:, 0]  # predict the change from u0


# light: ~0.14k multiply-adds per grid point, so the data path shows; heavy: ~6.5k, compute-bound.
MODELS = {"light": dict(width=8, depth=0, kernel=3), "heavy": dict(width=24, depth=2, kernel=5)}


def memory_total(ranks, shared_bytes):
    """The job's memory: every rank's and worker's PSS, with a dataset cache counted whole (it lives in
    /dev/shm whether or not its pages are mapped yet) in place of the share the ranks map of it."""
    if shared_bytes:
        return sum(r["pss"] - r["pss_shmem"] for r in ranks) + shared_bytes
    return sum(r["pss"] for r in ranks)


def job_defaults():
    """The job config's keys this script shares with the built-in learner (under tandem run)."""
    path = os.environ.get("TANDEM_CONFIG")
    if not path:
        return {}
    c = tomllib.load(open(path, "rb"))
    get = lambda table, key: c.get(table, {}).get(key)
    return {k: v for k, v in dict(cache=get("data", "name"), dir=get("data", "from"), mean=get("data", "mean"),
                                  std=get("data", "std"), global_batch=get("supervised", "batch_size"),
                                  steps=get("supervised", "steps"), device=get("learner", "device"),
                                  seed=get("learner", "seed"),
                                  threads=get("learner", "threads"), report=get("learner", "report_every_steps"),
                                  feed_workers=get("supervised", "feed_workers"),
                                  lr=get("optimizer", "lr")).items() if v is not None}


def device_name(text):
    """--device, spelled as the job config's learner.device is."""
    if text in ("cpu", "cuda") or re.fullmatch(r"cuda:[0-9]+", text):
        return text
    raise argparse.ArgumentTypeError(f"'{text}' is not cpu, cuda or cuda:N")


def arguments(world):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", choices=["tandem", "memory", "loader"], default="tandem")
    p.add_argument("--load", choices=["mmap", "memory"], default="mmap", help="--data loader: how a worker opens the files")
    p.add_argument("--workers", type=int, default=2, help="--data loader: DataLoader workers per rank")
    p.add_argument("--model", choices=sorted(MODELS), default="light")
    p.add_argument("--device", type=device_name, default="cpu",
                   help="cpu (Gloo), cuda (NCCL, each rank on GPU LOCAL_RANK) or cuda:N (GPU N, one rank per node)")
    p.add_argument("--cache", default="pde", help="dataset cache (--data tandem)")
    p.add_argument("--dir", default="data/pde", help=".npy directory (--data memory, loader)")
    p.add_argument("--mean", default="0.5")
    p.add_argument("--std", default="0.5")
    p.add_argument("--batch", type=int, help="samples per rank per step (default global_batch / ranks)")
    p.add_argument("--global-batch", type=int, default=256)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--warmup", type=int, default=10, help="steps left out of the timed samples/s")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    p.add_argument("--feed-workers", type=int, default=1, help="--data tandem: HostFeed gather threads per rank")
    p.add_argument("--report", type=int, default=10, help="steps between metrics rows and log lines")
    p.add_argument("--out", type=pathlib.Path, help="rank 0 writes the timed result here (JSON)")
    p.set_defaults(**job_defaults())
    a = p.parse_args()
    a.mean, a.std = float(str(a.mean).split(",")[0]), float(str(a.std).split(",")[0])
    a.batch = a.batch or max(1, a.global_batch // world)
    if a.warmup >= a.steps:
        p.error(f"--warmup {a.warmup} must be below --steps {a.steps}")
    return a


def batches(a, rank, world, device):
    if a.data == "tandem":
        return TandemBatches(a.cache, a.batch, rank, world, a.seed, a.mean, a.std, a.feed_workers, device)
    check_npy_dir(pathlib.Path(a.dir))
    if a.data == "memory":
        return MemoryBatches(pathlib.Path(a.dir), a.batch, rank, world, a.seed, a.mean, a.std, device)
    return LoaderBatches(pathlib.Path(a.dir), a.batch, rank, world, a.seed, a.mean, a.std, a.workers, a.load, device)


def placement(a):
    """The rank's device and process group backend: a GPU (LOCAL_RANK's, or the one named) and NCCL, or
    the CPU and Gloo."""
    if a.device == "cpu":
        return torch.device("cpu"), "gloo"
    local_ranks = int(os.environ.get("LOCAL_WORLD_SIZE", 1))
    if a.device != "cuda" and local_ranks > 1:
        raise BadInput(f"--device {a.device} names one GPU for this node's {local_ranks} ranks: "
                       "use --device cuda (each rank on GPU LOCAL_RANK)")
    if not torch.cuda.is_available():
        raise BadInput(f"--device {a.device} but this torch sees no GPU: run with --device cpu")
    gpus = torch.cuda.device_count()
    if a.device == "cuda":
        index = int(os.environ.get("LOCAL_RANK", 0))
        if index >= gpus:
            raise BadInput(f"LOCAL_RANK {index} but only {gpus} GPUs: start one rank per GPU")
    else:
        index = int(a.device.split(":")[1])
        if index >= gpus:
            raise BadInput(f"--device {a.device} but this machine has {gpus} GPUs: name one of cuda:0-{gpus - 1}")
    torch.cuda.set_device(index)
    return torch.device("cuda", index), "nccl"


def now(device):
    """The wall clock once the GPU has done what was queued: a timed window ends with its work."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


def main():
    # torchrun's variables: the launcher (or torchrun) sets them; init_process_group reads them itself.
    missing = [v for v in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if v not in os.environ]
    if missing:
        raise BadInput(f"{', '.join(missing)} not set: start it with torchrun or tandem run (examples/ddp-pde.toml)")
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    a = arguments(world)
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)  # the same initial weights on every rank (DDP also broadcasts rank 0's)
    device, backend = placement(a)
    dist.init_process_group(backend)
    joined = None
    with contextlib.ExitStack() as stack:
        if os.environ.get("TANDEM_JOB"):
            import tandem  # only under tandem run: torchrun's users need not have it installed
            joined = stack.enter_context(tandem.job())
        source = stack.enter_context(batches(a, rank, world, device))
        model = DistributedDataParallel(Surrogate(**MODELS[a.model]).to(device),
                                        device_ids=[device.index] if device.type == "cuda" else None)
        optimizer = torch.optim.Adam(model.parameters(), lr=a.lr)
        print(f"ddp_pde: rank {rank}/{world} pid {os.getpid()}: {a.model} model "
              f"({sum(p.numel() for p in model.parameters())} parameters), {a.steps} steps of {a.batch} "
              f"from {source.describe()} on {device}", flush=True)
        # The losses are summed where they are made and read at a report: a read per step would make a GPU
        # rank wait for every step before asking for the next batch.
        step, loss_sum, window_steps, first_loss, t0, window = 0, 0.0, 0, None, None, time.perf_counter()
        waited = 0.0  # timed seconds spent waiting for a batch: where a data path shows as the bottleneck
        memory = None
        while step < a.steps and not (joined and joined.should_stop):
            batches_left, asked = source.epoch(), time.perf_counter()
            for x, regime in batches_left:
                waited += time.perf_counter() - asked if t0 is not None else 0.0
                u0, target = x[:, :1], x[:, 1]  # the two rows of each sample (make_pde_dataset.py)
                loss = F.mse_loss(model(u0, regime), target)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                step += 1
                loss_sum, window_steps = loss_sum + loss.detach(), window_steps + 1
                if step == a.warmup:
                    t0, cpu0 = now(device), tree_cpu_seconds(os.getpid())
                if step % a.report == 0 or step == a.steps:
                    mean_loss = float(loss_sum) / window_steps
                    first_loss = mean_loss if first_loss is None else first_loss
                    rate = window_steps * a.batch / (time.perf_counter() - window)
                    if joined:
                        joined.report(step=step, epoch=source.epoch_index, samples=step * a.batch, loss=mean_loss,
                                      samples_per_s=rate, lr=a.lr)
                    if rank == 0:
                        print(f"ddp_pde: step {step} loss {mean_loss:.5f} {rate * world:.0f} samples/s", flush=True)
                    loss_sum, window_steps, window = 0.0, 0, time.perf_counter()
                if step == a.steps:
                    # Measured while the loader's workers still live: they are part of the cost.
                    seconds, cpu = now(device) - t0, tree_cpu_seconds(os.getpid()) - cpu0
                    memory = tree_memory(os.getpid())
                    gpu_bytes = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else 0
                if step >= a.steps or (joined and joined.should_stop):
                    break
                asked = time.perf_counter()
        if memory is not None:
            # A tensor all_gather whose tensors live until the end: all_gather_object's temporaries are
            # freed by Gloo's worker thread, which then needs the GIL; if that races with the process
            # group's destructor (holding the GIL, joining that thread), torch 1.13 deadlocks at exit.
            # (NCCL gathers GPU tensors only, hence the device.)
            mine = torch.tensor([seconds, waited, cpu, gpu_bytes] + [memory[k] for k in MEMORY_FIELDS],
                                dtype=torch.float64, device=device)
            everyone = [torch.empty_like(mine) for _ in range(world)]
            dist.all_gather(everyone, mine)
            gathered = [dict(seconds=float(t[0]), waited=float(t[1]), cpu=float(t[2]), gpu_bytes=int(t[3]),
                             memory={k: int(v) for k, v in zip(MEMORY_FIELDS, t[4:].tolist())})
                        for t in (t.cpu() for t in everyone)]
            if rank == 0:
                result = dict(data=a.data, load=a.load if a.data == "loader" else None,
                              workers=a.workers if a.data == "loader" else None, model=a.model, ranks=world,
                              device=device.type, gpu_memory_bytes=[r["gpu_bytes"] for r in gathered],
                              batch_per_rank=a.batch, timed_steps=a.steps - a.warmup,
                              samples_per_s=world * a.batch * (a.steps - a.warmup) / max(r["seconds"] for r in gathered),
                              cpu_ms_per_sample=1e3 * sum(r["cpu"] for r in gathered) / (world * a.batch * (a.steps - a.warmup)),
                              data_wait_fraction=max(r["waited"] / r["seconds"] for r in gathered),
                              first_loss=first_loss, last_loss=mean_loss,
                              ranks_memory=[r["memory"] for r in gathered], source=source.describe(),
                              memory_bytes=memory_total([r["memory"] for r in gathered], source.shared_bytes))
                print("ddp_pde: result " + json.dumps(result), flush=True)
                if a.out:
                    a.out.write_text(json.dumps(result) + "\n")
        print(f"ddp_pde: rank {rank} {'finished' if step >= a.steps else 'stopped'} at step {step}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    try:
        main()
    except BadInput as e:  # a missing or malformed dataset: one line naming it and the fix
        sys.exit(f"ddp_pde: {e}")
