#!/usr/bin/env python3
"""The mp_learner.py pattern: a PyTorch learner publishing its weights to evaluator processes.

    PYTHONPATH=build/python /usr/bin/python3 examples/python/mp_learner.py --params-mb 100 --steps 60

The user's own model and loop (an MLP here) train on the CPU (or the GPU, --device cuda) and publish every --publish-every steps
to --actors evaluator processes (multiprocessing, spawned: no `tandem run` needed), twice in one run:

* tandem: ``tandem.WeightPublisher(model, optimizer=opt)``. publish() hands a slab slot to a C++ copier
  thread and returns; the copy overlaps the next forward and backward, and optimizer.step() waits for
  it first. Evaluators follow with ``tandem.WeightFollower.load_into(model)``: the newest complete
  version, never torn; ``wait()`` sleeps until the learner's commit wakes it. Each evaluator binds its
  model before the run starts (the first ``load_into`` flattens it and attaches), as the baseline's
  evaluators make their model before it starts.
* baseline: what users write today: ``shared.load_state_dict({k: v.cpu() ...})`` into a model in
  shared memory (``share_memory()``) under a lock, with a version counter the evaluators poll; they
  copy it out under the same lock.

Reported per mode: the training thread's time blocked per publish, and publish-to-visible latency
(publish() called -> an evaluator's model holds that version), with the JSON line for scripts. With
--check, every evaluator hashes what it loaded and the learner what it published: the versions must
increase and the bytes be identical (python/tests/test_mp_learner.py runs it at a small size).
"""
import argparse
import hashlib
import json
import statistics
import time

import torch
import torch.multiprocessing as mp  # registers the reductions that share tensors with children

import tandem


def make_model(params_mb: float) -> torch.nn.Module:
    """An MLP of about params_mb MB of float32 parameters, most of them in the hidden layer."""
    width = max(16, int((params_mb * 1e6 / 4) ** 0.5))
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, width), torch.nn.ReLU(), torch.nn.Linear(width, width),
                               torch.nn.ReLU(), torch.nn.Linear(width, 10))


def digest(model: torch.nn.Module) -> str:
    h = hashlib.blake2b(digest_size=16)
    for t in model.state_dict().values():
        h.update(t.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def evaluate(model: torch.nn.Module, x: torch.Tensor) -> None:
    with torch.no_grad():  # the evaluator's own work with each version
        model(x)


def tandem_evaluator(params_mb: float, check: bool, slab: str, final, ready, out) -> None:
    torch.set_num_threads(1)
    model, x = make_model(params_mb), torch.randn(8, 64)
    follower, seen, last = tandem.WeightFollower(slab=slab), [], 0
    follower.load_into(model)  # binds the model (flattens it, attaches): the loop's loads are copies only
    ready.release()
    while not (final.value and last >= final.value):
        try:
            follower.wait(newer_than=last, timeout=0.2)
        except TimeoutError:
            continue
        v = follower.load_into(model)
        if v is None:
            continue
        seen.append((v, time.monotonic_ns(), digest(model) if check else ""))
        last = v
        evaluate(model, x)
    follower.close()
    out.put(seen)


def baseline_evaluator(params_mb: float, check: bool, shared, version, lock, final, ready, out) -> None:
    torch.set_num_threads(1)
    model, x = make_model(params_mb), torch.randn(8, 64)
    seen, last = [], 0
    ready.release()
    while not (final.value and last >= final.value):
        if version.value <= last:
            time.sleep(0.0002)
            continue
        with lock:  # the learner's load_state_dict must not run while this copies
            v = version.value
            model.load_state_dict(shared.state_dict())
        seen.append((v, time.monotonic_ns(), digest(model) if check else ""))
        last = v
        evaluate(model, x)
    out.put(seen)


def train(args, model, opt, publish) -> dict:
    """The user's loop. publish(step) -> version, or None when skipped; returns per-version call times."""
    calls, blocked_us = {}, []
    for step in range(1, args.steps + 1):
        x = torch.randn(args.batch, 64, device=args.device)
        y = torch.randint(0, 10, (args.batch,), device=args.device)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % args.publish_every == 0 or step == args.steps:
            d = digest(model) if args.check else ""  # the weights at the call (not timed)
            t0 = time.monotonic_ns()
            v = publish(step)
            blocked_us.append((time.monotonic_ns() - t0) / 1e3)
            if v is not None:
                calls[v] = (t0, d)
    return {"calls": calls, "call_us": blocked_us}


def run_mode(args, mode: str) -> dict:
    ctx = mp.get_context("spawn")
    final, ready, out = ctx.Value("q", 0), ctx.Semaphore(0), ctx.Queue()
    model = make_model(args.params_mb).to(args.device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    if mode == "tandem":
        pub = tandem.WeightPublisher(model, args.job, optimizer=opt, model_name="mlp")
        target = (tandem_evaluator, (args.params_mb, args.check, pub.slab, final, ready, out))

        def publish(step):
            return pub.publish(step)
    else:
        shared = make_model(args.params_mb)
        shared.share_memory()  # Module.share_memory(): every tensor's storage into shared memory
        version, lock = ctx.Value("q", 0, lock=False), ctx.Lock()
        target = (baseline_evaluator, (args.params_mb, args.check, shared, version, lock, final, ready, out))

        def publish(step):
            with lock:
                shared.load_state_dict({k: v.cpu() for k, v in model.state_dict().items()})
                version.value += 1
                return version.value

    procs = [ctx.Process(target=target[0], args=target[1]) for _ in range(args.actors)]
    for p in procs:
        p.start()
    for _ in procs:
        ready.acquire()
    start = time.monotonic()
    r = train(args, model, opt, publish)
    train_s = time.monotonic() - start
    if mode == "tandem":
        pub.flush()
        stats = pub.stats()
        last = max(r["calls"])
        # The fence inside optimizer.step() blocks training too: counted with the calls.
        r["blocked_us"] = [c + stats["total_fence_us"] / max(1, stats["calls"]) for c in r["call_us"]]
        r["max_fence_ms"] = stats["max_fence_us"] / 1e3
    else:
        last = version.value
        r["blocked_us"] = r["call_us"]
    final.value = last
    seen = [out.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    if mode == "tandem":
        pub.close()
    return summarize(mode, r, seen, train_s)


def summarize(mode: str, r: dict, seen: list, train_s: float) -> dict:
    visible_ms, increasing, identical, checked = [], True, True, False
    for actor in seen:
        versions = [v for v, _, _ in actor]
        increasing &= all(b > a for a, b in zip(versions, versions[1:]))
        for v, t, d in actor:
            called_ns, want = r["calls"][v]
            visible_ms.append((t - called_ns) / 1e6)
            if want:  # digests exist only under --check ("" otherwise)
                checked = True
                identical &= d == want
    q = sorted(visible_ms)
    ms = sorted(b / 1e3 for b in r["blocked_us"])
    return {"mode": mode, "publishes": len(r["blocked_us"]), "train_s": round(train_s, 3),
            "blocked_ms_median": round(statistics.median(ms), 4), "blocked_ms_mean": round(statistics.mean(ms), 4),
            "blocked_ms_max": round(ms[-1], 4), "max_fence_ms": round(r.get("max_fence_ms", 0.0), 4),
            "visible_ms_median": round(statistics.median(q), 3) if q else None,
            "visible_ms_p99": round(q[min(len(q) - 1, int(0.99 * len(q)))], 3) if q else None,
            "versions_seen": [[v for v, _, _ in a] for a in seen],
            "increasing": increasing, "identical": identical if checked else None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--params-mb", type=float, default=100)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--publish-every", type=int, default=3)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--actors", type=int, default=2)
    ap.add_argument("--device", default="cpu", help="where the learner trains (the evaluators stay on the CPU)")
    ap.add_argument("--mode", choices=["both", "tandem", "baseline"], default="both")
    ap.add_argument("--job", default=f"mp-learner-{time.monotonic_ns()}", help="names the weight slab")
    ap.add_argument("--check", action="store_true", help="hash every published and loaded version")
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()
    modes = ["tandem", "baseline"] if args.mode == "both" else [args.mode]
    results = [run_mode(args, m) for m in modes]
    for r in results:
        print(f"{r['mode']:>8}: {r['publishes']} publishes of {args.params_mb:g} MB in {r['train_s']:.1f} s; "
              f"training blocked per publish median {r['blocked_ms_median']:.3f} ms (max {r['blocked_ms_max']:.3f}); "
              f"publish -> visible median {r['visible_ms_median']} ms (p99 {r['visible_ms_p99']}); "
              f"increasing {r['increasing']}, identical {r['identical'] if args.check else 'not checked'}")
    if len(results) == 2:
        t, b = results
        print(f"training blocked: {b['blocked_ms_median'] / max(t['blocked_ms_median'], 1e-6):.0f}x less than the "
              f"baseline (median)")
    line = json.dumps({"bench": "mp_learner", "params_mb": args.params_mb, "actors": args.actors, "device": args.device,
                       "publish_every": args.publish_every, "results": results})
    print(line)
    if args.json:
        with open(args.json, "w") as f:
            f.write(line + "\n")


if __name__ == "__main__":
    main()
