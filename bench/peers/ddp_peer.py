#!/usr/bin/env python3
"""PyTorch baseline for `tandem bench ddp`: the data-parallel training step a PyTorch user writes,
DistributedDataParallel, timed in the same setup as Tandem's learner ranks: the same model (Tandem's
built-in "cnn" or "resnet18", common/torch/builtin_nets/networks.cpp, layer for layer: python/tandem/builtin_nets.py builds
both), the same batch per rank, one intra-op thread per rank, SGD with Nesterov momentum and weight
decay, cross-entropy.

  --device cpu:  Gloo, batches gathered on the host from the rank's shard.
  --device cuda: NCCL, rank r on GPU LOCAL_RANK; the rank's shard lives on its GPU (uint8) and each
                 step gathers a batch from a per-epoch permutation there, converts and normalises it
                 (as Tandem's DeviceFeed does); model and inputs channels-last, cuDNN benchmark mode;
                 --precision bf16 runs forward and loss under torch.autocast(bfloat16) (float32 weights).

Run under torchrun, one process per rank (Debian's torchrun needs `--redirects 1 --tee 1` with
Python 3.11):
  torchrun --standalone --nproc_per_node=2 --redirects 1 --tee 1 ddp_peer.py --dataset fmnist

Data: each rank samples its batches from its own shard of a Tandem dataset cache (--dataset NAME maps
/dev/shm/tandem.data.NAME read-only, as docs/FORMAT.md describes), normalised as the learner does;
without --dataset, random 1x28x28 images. Rank 0 prints one JSON line ("bench": "ddp_peer") with the
mean step time and the samples/s of all ranks together, measured over --steps steps after --warmup
(on GPUs between two device synchronisations).
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
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from twins import Cnn, ResNet18  # noqa: E402  (the one Python spelling of Tandem's models)


def load_split(name, split):
    """(x uint8 [n, C, H, W], y int64 [n]) of a dataset cache's split, zero-copy views of the mapping."""
    from feed_peer import read_layout  # the one reader of the dataset cache layout among the peers
    with open(f"/dev/shm/tandem.data.{name}", "rb") as f:
        buf = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
    x_off, x_stride, shape, y_off, begin, end = read_layout(buf, name, split)
    n_all = end
    x = np.frombuffer(buf, np.uint8, count=n_all * x_stride, offset=x_off).reshape(n_all, *shape)
    y = np.frombuffer(buf, np.int64, count=n_all, offset=y_off)
    return x[begin:end], y[begin:end]


def host_steps(args, model, opt, x_all, y_all, shard, rng):
    """The CPU step: a batch gathered on the host, forward, backward (DDP's Gloo all-reduce), update."""
    def step():
        idx = np.sort(rng.choice(shard, args.batch, replace=False))
        x = torch.from_numpy(x_all[idx]).float().div_(255).sub_(args.mean).div_(args.std)
        y = torch.from_numpy(y_all[idx])
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()
        opt.step()
    return step


def device_steps(args, model, opt, x_all, y_all, shard, device):
    """The GPU step: the shard on the GPU, batches from a per-epoch permutation, bf16 under autocast."""
    x_gpu = torch.from_numpy(np.ascontiguousarray(x_all[shard])).to(device)
    y_gpu = torch.from_numpy(np.ascontiguousarray(y_all[shard])).to(device)
    per_epoch = len(shard) // args.batch
    state = {"order": None, "at": per_epoch}
    autocast = torch.autocast("cuda", dtype=torch.bfloat16, enabled=args.precision == "bf16")

    def step():
        if state["at"] == per_epoch:
            state["order"], state["at"] = torch.randperm(len(shard), device=device), 0
        rows = state["order"][state["at"] * args.batch:(state["at"] + 1) * args.batch]
        state["at"] += 1
        x = x_gpu.index_select(0, rows).float().div_(255).sub_(args.mean).div_(args.std)
        x = x.contiguous(memory_format=torch.channels_last)
        y = y_gpu.index_select(0, rows)
        opt.zero_grad(set_to_none=True)
        with autocast:
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
    return step


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", default="", help="a preloaded Tandem dataset cache (default: random images)")
    ap.add_argument("--split", default="train")
    ap.add_argument("--model", default="cnn", choices=["cnn", "resnet18"])
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    ap.add_argument("--batch", type=int, default=128, help="samples per rank per step")
    ap.add_argument("--steps", type=int, default=200, help="timed steps")
    ap.add_argument("--warmup", type=int, default=30, help="untimed steps first")
    ap.add_argument("--mean", type=float, default=0.2860)
    ap.add_argument("--std", type=float, default=0.3530)
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--json", default="", help="also write the JSON line to this file (rank 0)")
    args = ap.parse_args()
    if args.precision == "bf16" and args.device != "cuda":
        sys.exit("ddp_peer.py: --precision bf16 needs --device cuda")

    torch.set_num_threads(1)
    cuda = args.device == "cuda"
    if cuda:
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
        torch.backends.cudnn.benchmark = True  # fixed shapes, as the learner
    else:
        device = torch.device("cpu")
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    if args.dataset:
        x_all, y_all = load_split(args.dataset, args.split)
    else:
        x_all = np.random.default_rng(0).integers(0, 256, (60000, 1, 28, 28), dtype=np.uint8)
        y_all = np.random.default_rng(1).integers(0, args.classes, 60000).astype(np.int64)
    shard = np.arange(rank, len(y_all), world)  # this rank's disjoint shard, as the learner's sampler
    _, c, h, w = x_all.shape

    net = Cnn(c, h, w, args.classes) if args.model == "cnn" else ResNet18(c, args.classes)
    net = net.to(device, memory_format=torch.channels_last) if cuda else net
    model = DistributedDataParallel(net, device_ids=[device.index] if cuda else None)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=5e-4)
    if cuda:
        step = device_steps(args, model, opt, x_all, y_all, shard, device)
    else:
        step = host_steps(args, model, opt, x_all, y_all, shard, np.random.default_rng(rank))

    def settle():
        dist.barrier()
        if cuda:
            torch.cuda.synchronize()

    for _ in range(args.warmup):
        step()
    settle()
    start = time.perf_counter()
    for _ in range(args.steps):
        step()
    settle()
    seconds = time.perf_counter() - start
    if rank == 0:
        line = json.dumps({"bench": "ddp_peer", "backend": "nccl" if cuda else "gloo", "model": args.model,
                           "device": args.device, "precision": args.precision, "ranks": world,
                           "batch_per_rank": args.batch, "threads_per_rank": torch.get_num_threads(),
                           "steps": args.steps, "step_ms": round(seconds / args.steps * 1e3, 3),
                           "samples_per_s": round(world * args.batch * args.steps / seconds, 1),
                           "torch": torch.__version__})
        print(line, flush=True)
        if args.json:
            with open(args.json, "w") as f:
                f.write(line + "\n")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
