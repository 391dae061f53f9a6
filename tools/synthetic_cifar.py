#!/usr/bin/env python3
"""Writes synthetic CIFAR-10 binary batches (data_batch_1..5.bin, test_batch.bin) for machines
without the real set: each record is 1 label byte + 3072 image bytes (R, G, B planes of 32x32), as in
the real files. Each class has a fixed random colour template; a sample is its class's template,
shifted by up to 4 pixels, plus noise, so a model can learn it but not trivially.

  tools/synthetic_cifar.py OUT_DIR [--train 50000] [--test 10000] [--seed 0]
"""
import argparse
import os

import numpy as np


def make(rng, templates, n):
    labels = rng.integers(0, 10, size=n, dtype=np.uint8)
    images = np.empty((n, 3, 32, 32), dtype=np.uint8)
    for start in range(0, n, 5000):
        lab = labels[start:start + 5000]
        base = templates[lab]
        dx, dy = rng.integers(-4, 5, size=2)
        base = np.roll(base, (int(dy), int(dx)), axis=(2, 3))
        noise = rng.normal(0, 40, size=base.shape)
        images[start:start + 5000] = np.clip(base + noise, 0, 255).astype(np.uint8)
    return labels, images


def write(path, labels, images):
    records = np.empty((len(labels), 3073), dtype=np.uint8)
    records[:, 0] = labels
    records[:, 1:] = images.reshape(len(labels), 3072)
    records.tofile(path)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--train", type=int, default=50000)
    ap.add_argument("--test", type=int, default=10000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    smooth = rng.integers(0, 256, size=(10, 3, 8, 8)).astype(np.float64)
    templates = smooth.repeat(4, axis=2).repeat(4, axis=3)  # 8x8 colour blocks upscaled to 32x32
    os.makedirs(args.out, exist_ok=True)
    labels, images = make(rng, templates, args.train)
    per = args.train // 5
    for i in range(5):
        write(os.path.join(args.out, f"data_batch_{i + 1}.bin"), labels[i * per:(i + 1) * per], images[i * per:(i + 1) * per])
    labels, images = make(rng, templates, args.test)
    write(os.path.join(args.out, "test_batch.bin"), labels, images)
    print(f"synthetic CIFAR-10 batches in {args.out}: {5 * per} train, {args.test} test")


if __name__ == "__main__":
    main()
