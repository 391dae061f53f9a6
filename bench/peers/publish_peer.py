#!/usr/bin/env python3
"""The weight publish a PyTorch user writes today, timed for `tandem bench publish --peer`.

1. state_dict publish: `sd = {k: v.cpu() for k, v in model.state_dict().items()}` followed by
   `shared_model.load_state_dict(sd)` into a model whose tensors live in shared memory
   (`share_memory_()`), as multiprocessing actors would read it. The training thread is blocked for
   all of it.
2. flat pinned copy: one flat device tensor of the same size copied into one pinned host tensor
   (`non_blocking=True` + synchronize): the floor a D2H publish can reach.

The model is `--tensors` float32 parameters whose sizes add up to `--bytes` (--shape flat), or
(--shape transformer) a 12-layer 1024-wide torch.nn.TransformerEncoder (16 heads, 4096 feed-forward):
144 tensors, 604.6 MB, whose state_dict cost depends on those shapes. Prints a table and one JSON
line starting with {"bench": "publish_peer".
"""
import argparse
import json
import statistics
import time

import torch


class Flat(torch.nn.Module):
    def __init__(self, nbytes, tensors):
        super().__init__()
        numel = max(1, nbytes // 4)
        per = max(1, numel // tensors)
        sizes = [per] * (numel // per)
        if numel % per:
            sizes.append(numel % per)
        self.params = torch.nn.ParameterList([torch.nn.Parameter(torch.randn(n) * 0.01) for n in sizes])


def transformer():
    layer = torch.nn.TransformerEncoderLayer(d_model=1024, nhead=16, dim_feedforward=4096)
    return torch.nn.TransformerEncoder(layer, num_layers=12)


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn, device, seconds, min_reps=3):
    times = []
    deadline = time.perf_counter() + seconds
    while len(times) < min_reps or time.perf_counter() < deadline:
        sync(device)
        t0 = time.perf_counter()
        fn()
        sync(device)
        times.append((time.perf_counter() - t0) * 1e3)
        if len(times) >= 200:
            break
    return statistics.median(times), min(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bytes", type=int, help="flat shape: total bytes (required)")
    ap.add_argument("--shape", choices=["flat", "transformer"], default="flat")
    ap.add_argument("--tensors", type=int, default=256)
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--device", default="cuda:0" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args()
    device = torch.device(args.device)

    if args.shape == "flat" and args.bytes is None:
        ap.error("--bytes is required with --shape flat")
    make = transformer if args.shape == "transformer" else (lambda: Flat(args.bytes, args.tensors))
    model = make().to(device)
    shared = make()
    shared.share_memory()
    nbytes = sum(p.numel() * p.element_size() for p in model.parameters())

    def state_dict_publish():
        sd = {k: v.cpu() for k, v in model.state_dict().items()}
        shared.load_state_dict(sd)

    sd_ms, sd_best = timed(state_dict_publish, device, args.seconds)

    flat = torch.empty(nbytes, dtype=torch.uint8, device=device)
    pinned = torch.empty(nbytes, dtype=torch.uint8, pin_memory=device.type == "cuda")
    pinned_ms, pinned_best = timed(lambda: pinned.copy_(flat, non_blocking=True), device, args.seconds)

    print(f"{'peer (' + str(device) + ')':<40} {'median ms':>10} {'best ms':>10}")
    print(f"{'state_dict .cpu() + load_state_dict':<40} {sd_ms:>10.2f} {sd_best:>10.2f}")
    print(f"{'flat pinned copy':<40} {pinned_ms:>10.2f} {pinned_best:>10.2f}  ({nbytes / pinned_best / 1e6:.1f} GB/s)")
    print(json.dumps({"bench": "publish_peer", "shape": args.shape, "bytes": nbytes, "tensors": len(list(model.parameters())),
                      "device": str(device), "torch": torch.__version__, "state_dict_ms": round(sd_ms, 4),
                      "pinned_copy_ms": round(pinned_ms, 4),
                      "pinned_gb_per_s": round(nbytes / pinned_best / 1e6, 2)}))


if __name__ == "__main__":
    main()
