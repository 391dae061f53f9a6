#!/usr/bin/env python3
"""PyTorch baselines for `tandem bench feed`: the ways a PyTorch user feeds uint8 image samples to a
GPU, timed in the same setup as Tandem's HostFeed and DeviceFeed (shuffled, drop_last, the same
uint8 -> float normalisation on the GPU, samples/s and GB/s of uint8 sample + int64 label read).

  dataloader_gpu_tensors  DataLoader over a TensorDataset of CUDA tensors (default collate)
  dataloader_pin_wN       DataLoader over CPU uint8 tensors with N = 0/4/8 workers and pin_memory,
                          then .to(cuda, non_blocking=True) and the normalisation on the GPU
  index_select_loop       a Python loop of index_select on a GPU-resident uint8 tensor, with a
                          per-epoch torch.randperm on the GPU

Data: a Tandem dataset cache (--dataset NAME maps /dev/shm/tandem.data.NAME read-only, as
docs/FORMAT.md describes; `tandem bench feed --peer` passes its own) or, without --dataset, 50000
synthetic 3x32x32 uint8 samples. Prints a table and one JSON line (--json FILE writes it too).
Runs on the GPU machine's torch (2.x); without CUDA the GPU rows say "skipped: no GPU".
"""
import argparse
import json
import mmap
import struct
import sys
import time

MEAN, STD = 0.5, 0.25  # what `tandem bench feed` asks its feeds for: (x / 255 - MEAN) / STD
SYNTHETIC_SAMPLES = 50000
WARMUP_BATCHES = 3

# docs/FORMAT.md: segment header (64 bytes), then the dataset descriptor.
HEADER_MAGIC = 0x004D4853444E4154  # "TANDSHM\0"
KIND_DATASET = 1
DESCRIPTOR = 64
NUM_SAMPLES = DESCRIPTOR + 336
NUM_FIELDS = DESCRIPTOR + 344
FIELDS = DESCRIPTOR + 368
FIELD_BYTES = 96
SPLITS = FIELDS + 8 * FIELD_BYTES
SPLIT_BYTES = 32
DTYPE_U8, DTYPE_I64 = 1, 5


def read_layout(buf, name, split):
    """Returns (x_offset, x_stride, sample_shape, y_offset, begin, end) of a dataset cache mapping."""
    magic, kind = struct.unpack_from("<QI", buf, 0)
    ready, = struct.unpack_from("<I", buf, 56)
    if magic != HEADER_MAGIC or kind != KIND_DATASET or ready != 1:
        sys.exit(f"feed_peer: /dev/shm/tandem.data.{name} is not a ready Tandem dataset cache")
    num_fields, num_splits = struct.unpack_from("<II", buf, NUM_FIELDS)
    fields = {}
    for i in range(num_fields):
        at = FIELDS + i * FIELD_BYTES
        field = bytes(buf[at:at + 32]).split(b"\0")[0].decode()
        dtype, ndim = struct.unpack_from("<II", buf, at + 32)
        shape = struct.unpack_from("<4Q", buf, at + 40)[:ndim]
        offset, stride = struct.unpack_from("<QQ", buf, at + 72)
        fields[field] = (dtype, tuple(shape), offset, stride)
    splits = {}
    for i in range(num_splits):
        at = SPLITS + i * SPLIT_BYTES
        splits[bytes(buf[at:at + 16]).split(b"\0")[0].decode()] = struct.unpack_from("<QQ", buf, at + 16)
    if fields.get("x", (0,))[0] != DTYPE_U8 or fields.get("y", (0,))[0] != DTYPE_I64:
        sys.exit(f"feed_peer: dataset '{name}' needs a uint8 field x and an int64 field y")
    if split not in splits:
        sys.exit(f"feed_peer: dataset '{name}' has no split '{split}' (it has {', '.join(splits)})")
    _, shape, x_offset, x_stride = fields["x"]
    begin, end = splits[split]
    return x_offset, x_stride, shape, fields["y"][2], begin, end


def open_cache(torch, name, split):
    """The split's x (uint8) and y (int64) as CPU tensors over a private mapping of the cache."""
    with open(f"/dev/shm/tandem.data.{name}", "rb") as f:
        buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)  # writable for frombuffer, never written
    x_offset, x_stride, shape, y_offset, begin, end = read_layout(buf, name, split)
    n = end - begin
    x = torch.frombuffer(buf, dtype=torch.uint8, count=n * x_stride, offset=x_offset + begin * x_stride)
    y = torch.frombuffer(buf, dtype=torch.int64, count=n, offset=y_offset + begin * 8)
    return x.view(n, *shape), y, buf


def normalise(x):
    return x.float().div_(255).sub_(MEAN).div_(STD)


def loader_batches(loader, device):
    while True:
        for x, y in loader:
            yield normalise(x.to(device, non_blocking=True)), y.to(device, non_blocking=True)


def index_select_batches(torch, x, y, batch):
    n = x.shape[0]
    while True:
        perm = torch.randperm(n, device=x.device)
        for i in range(0, n - batch + 1, batch):
            idx = perm[i:i + batch]
            yield normalise(x.index_select(0, idx)), y.index_select(0, idx)


def measure(batches, seconds, sync):
    for _ in range(WARMUP_BATCHES):
        next(batches)
    sync()
    start = time.perf_counter()
    samples = 0
    while True:
        _, y = next(batches)
        samples += y.shape[0]
        if time.perf_counter() - start >= seconds:
            break
    sync()
    rate = samples / (time.perf_counter() - start)
    batches.close()  # ends the DataLoader iterator (and its workers) now
    return rate


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dataset", help="a preloaded Tandem dataset cache (default: synthetic CIFAR-shaped data)")
    p.add_argument("--split", default="train")
    p.add_argument("--seconds", type=float, default=2.0, help="seconds per measurement")
    p.add_argument("--batches", default="256,512,1024")
    p.add_argument("--workers", default="0,4,8", help="DataLoader worker counts")
    p.add_argument("--device", type=int, default=0, help="GPU index")
    p.add_argument("--json", help="also write the JSON line to this file")
    args = p.parse_args()

    import torch
    from torch.utils.data import DataLoader, TensorDataset

    if args.dataset:
        x, y, _mapping = open_cache(torch, args.dataset, args.split)  # the tensors view _mapping
    else:
        g = torch.Generator().manual_seed(0)
        x = torch.randint(0, 256, (SYNTHETIC_SAMPLES, 3, 32, 32), dtype=torch.uint8, generator=g)
        y = torch.randint(0, 10, (SYNTHETIC_SAMPLES,), dtype=torch.int64, generator=g)
    sample_bytes = x[0].numel() + 8
    cuda = torch.cuda.is_available()
    device = torch.device(f"cuda:{args.device}" if cuda else "cpu")
    dev = str(device)
    sync = (lambda: torch.cuda.synchronize(device)) if cuda else (lambda: None)
    x_gpu, y_gpu = (x.to(device), y.to(device)) if cuda else (None, None)

    print(f"feed_peer: torch {torch.__version__}, {torch.cuda.get_device_name(device) if cuda else 'no GPU'}, "
          f"dataset {args.dataset or 'synthetic'}: {x.shape[0]} samples of {'x'.join(map(str, x.shape[1:]))} uint8, "
          f"{args.seconds} s per run")
    print(f"{'feed':<24} {'batch':>6} {'device':<8} {'samples/s':>14} {'GB/s':>8}", flush=True)
    results = []

    def record(feed, batch, run):
        if not run:
            r = {"feed": feed, "batch": batch, "device": "-", "skipped": "no GPU"}
            print(f"{feed:<24} {batch:>6} {'-':<8} skipped: no GPU", flush=True)
        else:
            rate = measure(run(), args.seconds, sync)
            r = {"feed": feed, "batch": batch, "device": dev, "samples_per_s": round(rate, 1),
                 "gb_per_s": round(rate * sample_bytes / 1e9, 4)}
            print(f"{feed:<24} {batch:>6} {dev:<8} {rate:>14.0f} {r['gb_per_s']:>8.2f}", flush=True)
        results.append(r)

    for batch in [int(b) for b in args.batches.split(",")]:
        record("dataloader_gpu_tensors", batch, cuda and (lambda: loader_batches(
            DataLoader(TensorDataset(x_gpu, y_gpu), batch_size=batch, shuffle=True, drop_last=True), device)))
        for workers in [int(w) for w in args.workers.split(",")]:
            record(f"dataloader_pin_w{workers}", batch, lambda: loader_batches(
                DataLoader(TensorDataset(x, y), batch_size=batch, shuffle=True, drop_last=True, num_workers=workers,
                           pin_memory=cuda, persistent_workers=workers > 0), device))
        record("index_select_loop", batch, cuda and (lambda: index_select_batches(torch, x_gpu, y_gpu, batch)))

    line = json.dumps({"bench": "feed_peer", "torch": torch.__version__,
                       "gpu": torch.cuda.get_device_name(device) if cuda else None,
                       "dataset": args.dataset or "synthetic", "split": args.split, "samples": x.shape[0],
                       "sample_shape": list(x.shape[1:]), "sample_bytes": sample_bytes, "seconds": args.seconds,
                       "results": results})
    print(line)
    if args.json:
        with open(args.json, "w") as f:
            f.write(line + "\n")


if __name__ == "__main__":
    main()
