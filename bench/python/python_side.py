#!/usr/bin/env python3
"""Tandem's hot paths through `import tandem`, for `tandem bench python`: the Python HostFeed's and
DeviceFeed's samples/s, and WeightPublisher's publish-to-visible, measured exactly as tandem-bench
measures the C++ ones in the same run (bench/python_bench.cpp).

  feed     steps of HostFeed (and DeviceFeed on a GPU) over a dataset cache, shuffled, drop_last,
           normalised as (x / 255 - 0.5) / 0.25: 3 warm-up steps, then `for x, y in feed` over epochs for
           --seconds, a GPU sync before the clock stops; each step's batch is held until the next one
           exists, as that loop does (the C++ side holds its Step the same way).
  publish  a model of --tensors float32 tensors adding up to --bytes (on the GPU when one is visible)
           published --reps times: visible = the version's commit time (its slot's publish_ns, read
           through a lease) minus the clock just before publish() was called; call = time inside
           publish() (what training waits for).

Prints one JSON line starting with {"bench": "python_side".
"""
import argparse
import json
import os
import statistics
import time

import torch

import tandem

MEAN, STD = 0.5, 0.25
WARMUP_STEPS = 3


def measure_feed(feed, seconds, sync):
    """The loop a training script runs, `for epoch ...: for x, y in feed`, with nothing in its body."""
    for _ in range(WARMUP_STEPS):
        feed.next_step()
    sync()
    start = time.perf_counter()
    samples = 0
    running = True
    while running:
        for _, y in feed:
            samples += y.shape[0]  # as the C++ side's Step::samples() counts (faster than len(y))
            if time.perf_counter() - start >= seconds:
                running = False
                break
    sync()
    return samples / (time.perf_counter() - start)


class Flat(torch.nn.Module):
    """bench/peers/publish_peer.py's model: `tensors` float32 parameters adding up to `nbytes`."""

    def __init__(self, nbytes, tensors):
        super().__init__()
        numel = max(1, nbytes // 4)
        per = max(1, numel // tensors)
        sizes = [per] * (numel // per) + ([numel % per] if numel % per else [])
        self.params = torch.nn.ParameterList([torch.nn.Parameter(torch.zeros(n)) for n in sizes])


def measure_publish(nbytes, tensors, reps, device):
    model = Flat(nbytes, tensors).to(device)
    slab = tandem.slab_name(f"bench-python-{os.getpid()}")
    visible, calls = [], []
    with tandem.WeightPublisher(model, slab=slab) as pub, tandem.WeightFollower(slab=slab) as follower:
        warmup = 5  # every slot (4 by default) paged in once, as tandem-bench does
        for step in range(warmup + reps):
            t0 = tandem._tandem._testing.monotonic_ns()
            c0 = time.perf_counter()
            version = pub.publish(step)
            call = time.perf_counter() - c0
            pub.flush()
            with follower.lease() as lease:
                assert lease.version == version, (lease.version, version)
                seen = (lease.publish_ns - t0) / 1e6
            if step >= warmup:
                visible.append(seen)
                calls.append(call * 1e3)
            time.sleep(max(0.005, 0.5 * seen / 1e3))
    return {"visible_ms": statistics.median(visible), "visible_best_ms": min(visible),
            "call_ms": statistics.median(calls), "reps": reps}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dataset", help="a dataset cache (feed measurements)")
    p.add_argument("--split", default="train")
    p.add_argument("--seconds", type=float, default=2.0)
    p.add_argument("--batches", default="")
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--ring-slots", type=int, default=4)
    p.add_argument("--device", type=int, default=0)
    p.add_argument("--bytes", type=int, default=0, help="publish measurements: model bytes")
    p.add_argument("--tensors", type=int, default=256)
    p.add_argument("--reps", type=int, default=20)
    args = p.parse_args()

    cuda = torch.cuda.is_available()
    device = torch.device(f"cuda:{args.device}" if cuda else "cpu")
    sync = (lambda: torch.cuda.synchronize(device)) if cuda else (lambda: None)
    out = {"bench": "python_side", "torch": torch.__version__, "device": str(device), "feed": []}
    for batch in [int(b) for b in args.batches.split(",") if b]:
        common = dict(split=args.split, drop_last=True, mean=MEAN, std=STD, rank=0, world_size=1)
        feed = tandem.HostFeed(args.dataset, batch, workers=args.workers, ring_slots=args.ring_slots,
                               device=device if cuda else "cpu", **common)
        out["feed"].append({"feed": "host_feed", "batch": batch, "samples_per_s": measure_feed(feed, args.seconds, sync)})
        del feed
        if cuda:
            feed = tandem.DeviceFeed(args.dataset, batch, device=device, **common)
            out["feed"].append({"feed": "device_feed", "batch": batch,
                                "samples_per_s": measure_feed(feed, args.seconds, sync)})
            del feed
    if args.bytes:
        out["publish"] = measure_publish(args.bytes, args.tensors, args.reps, device)
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
