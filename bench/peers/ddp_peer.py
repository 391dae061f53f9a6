#!/usr/bin/env python3
"""PyTorch baseline for `tandem bench ddp`: the data-parallel training step a PyTorch user writes,
DistributedDataParallel over Gloo, timed in the same setup as Tandem's learner ranks: the same
model (Tandem's built-in "cnn", common/torch/models.cpp, layer for layer), the same batch per rank,
one intra-op thread per rank, SGD with Nesterov momentum and weight decay, cross-entropy.

Run under torchrun, one process per rank (Debian's torchrun needs `--redirects 1 --tee 1` with
Python 3.11):
  torchrun --standalone --nproc_per_node=2 --redirects 1 --tee 1 ddp_peer.py --dataset fmnist

Data: each rank samples its batches from its own shard of a Tandem dataset cache (--dataset NAME maps
/dev/shm/tandem.data.NAME read-only, as docs/FORMAT.md describes), normalised as the learner does;
without --dataset, random 1x28x28 images. Rank 0 prints one JSON line ("bench": "ddp_peer") with the
mean step time and the samples/s of all ranks together, measured over --steps steps after --warmup.
"""
import argparse
import json
import mmap
import os
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel


class Cnn(nn.Module):
    """common/torch/models.cpp "cnn": conv3x3(no bias)-BN-ReLU-pool twice, then 128 and the classes."""

    def __init__(self, channels, height, width, classes):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, 16, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(32)
        self.fc1 = nn.Linear(32 * (height // 4) * (width // 4), 128)
        self.fc2 = nn.Linear(128, classes)

    def forward(self, x):
        h = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        h = F.max_pool2d(F.relu(self.bn2(self.conv2(h))), 2)
        return self.fc2(F.relu(self.fc1(h.flatten(1))))


def load_split(name, split):
    """(x uint8 [n, C, H, W], y int64 [n]) of a dataset cache's split, zero-copy views of the mapping."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from feed_peer import read_layout  # the one reader of the dataset cache layout among the peers
    with open(f"/dev/shm/tandem.data.{name}", "rb") as f:
        buf = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
    x_off, x_stride, shape, y_off, begin, end = read_layout(buf, name, split)
    n_all = end
    x = np.frombuffer(buf, np.uint8, count=n_all * x_stride, offset=x_off).reshape(n_all, *shape)
    y = np.frombuffer(buf, np.int64, count=n_all, offset=y_off)
    return x[begin:end], y[begin:end]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", default="", help="a preloaded Tandem dataset cache (default: random images)")
    ap.add_argument("--split", default="train")
    ap.add_argument("--batch", type=int, default=128, help="samples per rank per step")
    ap.add_argument("--steps", type=int, default=200, help="timed steps")
    ap.add_argument("--warmup", type=int, default=30, help="untimed steps first")
    ap.add_argument("--mean", type=float, default=0.2860)
    ap.add_argument("--std", type=float, default=0.3530)
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--json", default="", help="also write the JSON line to this file (rank 0)")
    args = ap.parse_args()

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    if args.dataset:
        x_all, y_all = load_split(args.dataset, args.split)
    else:
        x_all = np.random.default_rng(0).integers(0, 256, (60000, 1, 28, 28), dtype=np.uint8)
        y_all = np.random.default_rng(1).integers(0, args.classes, 60000).astype(np.int64)
    shard = np.arange(rank, len(y_all), world)  # this rank's disjoint shard, as the learner's sampler
    rng = np.random.default_rng(rank)
    _, c, h, w = x_all.shape

    model = DistributedDataParallel(Cnn(c, h, w, args.classes))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=5e-4)

    def step():
        idx = np.sort(rng.choice(shard, args.batch, replace=False))
        x = torch.from_numpy(x_all[idx]).float().div_(255).sub_(args.mean).div_(args.std)
        y = torch.from_numpy(y_all[idx])
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()
        opt.step()

    for _ in range(args.warmup):
        step()
    dist.barrier()
    start = time.perf_counter()
    for _ in range(args.steps):
        step()
    dist.barrier()
    seconds = time.perf_counter() - start
    if rank == 0:
        line = json.dumps({"bench": "ddp_peer", "backend": "gloo", "ranks": world, "batch_per_rank": args.batch,
                           "threads_per_rank": torch.get_num_threads(), "steps": args.steps,
                           "step_ms": round(seconds / args.steps * 1e3, 3),
                           "samples_per_s": round(world * args.batch * args.steps / seconds, 1),
                           "torch": torch.__version__})
        print(line, flush=True)
        if args.json:
            with open(args.json, "w") as f:
                f.write(line + "\n")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
