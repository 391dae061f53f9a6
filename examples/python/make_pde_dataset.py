#!/usr/bin/env python3
"""Writes the 1-D PDE surrogate dataset of examples/ddp-pde.toml as .npy files:

    /usr/bin/python3 examples/python/make_pde_dataset.py DIR --samples 524288 --points 1024   # 1.0 GiB

Each sample is an initial condition u0(x) on a periodic grid of `points` cells and the solution
u(x, T) of the advection-diffusion equation u_t + c u_x = nu u_xx at T = 1, for one of four regimes
(nu, c), solved exactly in Fourier space. Files, as `tandem data preload --from DIR` reads them
(datasets/npy_reader.hpp):

    x_train.npy  uint8 (N, 2, points)   row 0: u0, row 1: u(T), each quantised as round((u + 1) * 127.5)
    y_train.npy  int64 (N,)             the regime 0..3 (the model's conditioning input)
    x_test.npy, y_test.npy              the same for --test samples

Why 8 bits and the target as x's second row: tandem's feeds (HostFeed) and the launcher's checks read
one uint8 tensor and one int64 label per sample, normalised as (x / 255 - mean) / std. With mean = std
= 0.5 both rows come back as floats in [-1, 1]; 8 bits cost 0.004 of resolution on a field in
[-1, 1], well below what the surrogate learns. The same files feed the DataLoader and in-memory
variants of examples/python/ddp_pde.py, so every variant trains on identical bytes.
"""
import argparse
import pathlib
import sys

import numpy as np

REGIMES = [(0.02, 0.0), (0.05, 0.5), (0.10, -1.0), (0.01, 2.0)]  # (nu, c) per label
CHUNK = 16384  # samples generated per pass: bounded memory (CHUNK x points x 16 bytes of FFT)


def initial_conditions(rng, n, points, modes=8):
    """The spectrum of smooth random periodic fields: a few low Fourier modes with decaying amplitudes."""
    k = np.arange(1, modes + 1)
    amp = rng.normal(size=(n, modes)) / k
    phase = rng.uniform(0, 2 * np.pi, size=(n, modes))
    spectrum = np.zeros((n, points // 2 + 1), dtype=np.complex128)
    spectrum[:, 1:modes + 1] = amp * np.exp(1j * phase)
    return spectrum


def solve(spectrum, labels, points, t=1.0):
    """Exact solution at time t: each Fourier mode decays by exp(-nu k^2 t) and turns by exp(-i c k t)."""
    nu = np.array([r[0] for r in REGIMES])[labels][:, None]
    c = np.array([r[1] for r in REGIMES])[labels][:, None]
    k = np.arange(points // 2 + 1)[None, :]
    return spectrum * np.exp(-nu * k * k * t - 1j * c * k * t)


def quantise(u):
    return np.clip(np.rint((u + 1.0) * 127.5), 0, 255).astype(np.uint8)


def write_split(out, split, n, points, rng):
    x = np.lib.format.open_memmap(out / f"x_{split}.npy", mode="w+", dtype=np.uint8, shape=(n, 2, points))
    y = np.empty(n, dtype=np.int64)
    for begin in range(0, n, CHUNK):
        m = min(CHUNK, n - begin)
        spectrum = initial_conditions(rng, m, points)
        labels = rng.integers(0, len(REGIMES), size=m)
        u0 = np.fft.irfft(spectrum, n=points, axis=1)
        scale = np.abs(u0).max(axis=1, keepdims=True)  # u0 in [-1, 1]; by the max principle u(T) too
        ut = np.fft.irfft(solve(spectrum, labels, points), n=points, axis=1)
        u0, ut = u0 / scale, ut / scale
        x[begin:begin + m, 0] = quantise(u0)
        x[begin:begin + m, 1] = quantise(ut)
        y[begin:begin + m] = labels
    x.flush()
    del x
    np.save(out / f"y_{split}.npy", y)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("dir", type=pathlib.Path)
    p.add_argument("--samples", type=int, default=524288, help="training samples (default 524288: 1.0 GiB at 1024 points)")
    p.add_argument("--test", type=int, default=4096, help="test samples")
    p.add_argument("--points", type=int, default=1024, help="grid cells per field (even)")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    if a.samples < 1 or a.test < 0 or a.points < 8 or a.points % 2:
        sys.exit("make_pde_dataset: --samples must be >= 1, --test >= 0 and --points an even number >= 8")
    a.dir.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(a.seed)
    write_split(a.dir, "train", a.samples, a.points, rng)
    if a.test:
        write_split(a.dir, "test", a.test, a.points, rng)
    gib = (a.samples + a.test) * (2 * a.points + 8) / 2**30
    print(f"make_pde_dataset: {a.samples} train + {a.test} test samples of {a.points} points in {a.dir} ({gib:.2f} GiB)")


if __name__ == "__main__":
    main()
