#!/usr/bin/env python3
"""The PyTorch peer of `tandem-bench graph`: one supervised training step (gather a batch from a
GPU-resident CIFAR-shaped pool, forward, cross-entropy, backward, SGD Nesterov, zero_grad) and one
evaluation forward, for the cnn and ResNet-18 built layer for layer as Tandem's C++ models
(python/tandem/builtin_nets.py; torchvision is not needed), eager and under
torch.compile(mode="reduce-overhead") (CUDA graphs through Inductor), in float32 and in bf16 under
torch.autocast(device_type="cuda", dtype=torch.bfloat16) (float32 weights, bf16 activations and
matmuls). Median step time over --steps steps after --warmup, timed with CUDA events. Prints a
table, then one JSON line:
{"bench": "graph_step_peer", "results": [{"model", "batch", "precision", "mode", "train_ms", "eval_ms"} ...],
 "compile_error": "..." (only when torch.compile failed)}.
"""
import argparse
import json
import statistics
import sys

import torch
import torch.nn.functional as F

from twins import Cnn, ResNet18  # Tandem's built-in networks in PyTorch, layer for layer


def median_ms(fn, warmup, steps):
    for _ in range(warmup):
        fn()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(steps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(steps)]
    for i in range(steps):
        starts[i].record()
        fn()
        ends[i].record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends))


def measure(name, batch, precision, mode, args, device):
    torch.manual_seed(0)
    autocast = torch.autocast("cuda", dtype=torch.bfloat16, enabled=precision == "bf16")
    model = (Cnn() if name == "cnn" else ResNet18()).to(device)
    pool_x = torch.randn(batch * 8, 3, 32, 32, device=device)
    pool_y = torch.randint(0, 10, (batch * 8,), device=device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=5e-4)

    def train_body(x, y):
        with autocast:
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=False)
        return loss.detach()

    def eval_body(x, y):
        with torch.no_grad(), autocast:
            return F.cross_entropy(model(x), y, reduction="sum")

    if mode == "compile":
        # As PyTorch's docs train with it: the model compiled (forward and backward in CUDA graphs), the
        # optimizer eager; each iteration marks a new step, so no graph output is read after a replay.
        # Gradients are set to None after each step: with CUDA graphs they live in the graph's memory,
        # which the next replay overwrites.
        compiled_train = torch.compile(model, mode="reduce-overhead")
        compiled_eval = torch.compile(model, mode="reduce-overhead")

        def train_fn(x, y):
            torch.compiler.cudagraph_mark_step_begin()
            with autocast:
                loss = F.cross_entropy(compiled_train(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            return loss.detach().clone()

        def eval_fn(x, y):
            torch.compiler.cudagraph_mark_step_begin()
            with torch.no_grad(), autocast:
                return F.cross_entropy(compiled_eval(x).clone(), y, reduction="sum")
    else:
        train_fn, eval_fn = train_body, eval_body
    step = [0]

    def batch_rows():
        step[0] += 1
        return torch.randint(0, pool_x.shape[0], (batch,), device=device)

    def train():
        rows = batch_rows()
        train_fn(pool_x.index_select(0, rows), pool_y.index_select(0, rows))

    def evaluate():
        rows = batch_rows()
        eval_fn(pool_x.index_select(0, rows), pool_y.index_select(0, rows))

    model.train()
    train_ms = median_ms(train, args.warmup, args.steps)
    model.eval()
    eval_ms = median_ms(evaluate, args.warmup, args.steps)
    return {"model": name, "batch": batch, "precision": precision, "mode": mode, "train_ms": round(train_ms, 4),
            "eval_ms": round(eval_ms, 4)}


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--models", default="cnn,resnet18")
    p.add_argument("--batches", default="128,512")
    p.add_argument("--precisions", default="fp32,bf16")
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--device", type=int, default=0)
    p.add_argument("--no-compile", action="store_true")
    p.add_argument("--cudnn-benchmark-limit", type=int, help="cuDNN plans timed per convolution (0: all)")
    args = p.parse_args()
    if not torch.cuda.is_available():
        sys.exit("graph_step_peer.py needs a CUDA GPU and torch sees none")
    device = torch.device("cuda", args.device)
    torch.cuda.set_device(device)
    torch.backends.cudnn.benchmark = True  # fixed shapes, as tandem-bench graph and the learner
    if args.cudnn_benchmark_limit is not None:
        torch.backends.cudnn.benchmark_limit = args.cudnn_benchmark_limit
    results, compile_error = [], None
    print(f"{'model':<10} {'batch':>6} {'prec':<5} {'mode':<8} {'train ms':>9} {'eval ms':>9}")
    for name in args.models.split(","):
        for batch in [int(b) for b in args.batches.split(",")]:
            for precision in args.precisions.split(","):
                modes = ["eager"] + ([] if args.no_compile or compile_error else ["compile"])
                for mode in modes:
                    try:
                        r = measure(name, batch, precision, mode, args, device)
                    except Exception as e:  # torch.compile needs a working Triton/compiler on the machine
                        if mode != "compile":
                            raise
                        compile_error = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                        print(f"torch.compile failed, eager only from here: {compile_error}")
                        continue
                    finally:
                        if mode == "compile":
                            torch._dynamo.reset()  # each measurement compiles afresh, as a new program would
                    results.append(r)
                    print(f"{name:<10} {batch:>6} {precision:<5} {mode:<8} {r['train_ms']:>9.3f} {r['eval_ms']:>9.3f}")
    line = {"bench": "graph_step_peer", "torch": torch.__version__,
            "cudnn_benchmark_limit": torch.backends.cudnn.benchmark_limit, "results": results}
    if compile_error:
        line["compile_error"] = compile_error
    print(json.dumps(line))


if __name__ == "__main__":
    main()
