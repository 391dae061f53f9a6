#!/usr/bin/env python3
"""Writes the seed corpora in corpus/<target>/: a few small valid and invalid datasets per fuzz
target, each input being a little-endian u16 n, n bytes of the first file, then the second file
(see dataset_input.hpp). Deterministic: rerunning it rewrites the same files."""
import gzip
import pathlib
import struct

HERE = pathlib.Path(__file__).resolve().parent


def pair(first: bytes, second: bytes) -> bytes:
    return struct.pack("<H", len(first)) + first + second


def idx(dims, data: bytes, magic=None) -> bytes:
    magic = 0x800 | len(dims) if magic is None else magic
    return struct.pack(">I", magic) + b"".join(struct.pack(">I", d) for d in dims) + data


def npy(descr: str, shape, data: bytes, version=1) -> bytes:
    dims = ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "")
    header = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (descr, dims)
    prefix = 10 if version == 1 else 12
    header += " " * (-(prefix + len(header) + 1) % 64) + "\n"
    size = struct.pack("<H", len(header)) if version == 1 else struct.pack("<I", len(header))
    return b"\x93NUMPY" + bytes([version, 0]) + size + header.encode() + data


def gz(data: bytes) -> bytes:
    return gzip.compress(data, mtime=0)


def images(n, h, w):
    return bytes((s * 131 + i * 7) & 0xFF for s in range(n) for i in range(h * w))


def write(target: str, seeds: dict):
    folder = HERE / "corpus" / target
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in seeds.items():
        (folder / name).write_bytes(data)


labels3 = bytes([0, 1, 2])
write("idx_plain", {
    "valid-3x4x4": pair(idx([3, 4, 4], images(3, 4, 4)), idx([3], labels3)),
    "truncated": pair(idx([3, 4, 4], images(3, 4, 4)[:-1]), idx([3], labels3)),
    "bad-magic": pair(idx([3, 4, 4], images(3, 4, 4), magic=0xDEADBEEF), idx([3], labels3)),
    "zero-rows": pair(idx([3, 0, 4], b""), idx([3], labels3)),
    "wrapping-dims": pair(idx([4, 0x80000000, 0x80000000], b""), idx([4], bytes(4))),
})
# 4 MiB of zeros deflate to ~4 KB; the trailer is forged to agree with a header claiming 1.2 GB.
forged = bytearray(gz(idx([1530612, 28, 28], bytes(4 << 20))))
forged[-4:] = struct.pack("<I", (16 + 1530612 * 784) % (1 << 32))
write("idx_gzip", {
    "valid-3x4x4": pair(gz(idx([3, 4, 4], images(3, 4, 4))), gz(idx([3], labels3))),
    "claims-more-than-it-holds": pair(gz(idx([1530612, 28, 28], bytes(4096))), gz(idx([1530612], b""))),
    "forged-trailer": pair(bytes(forged), gz(idx([1530612], bytes(1530612)))),
    "truncated": pair(gz(idx([3, 4, 4], images(3, 4, 4)))[:-9], gz(idx([3], labels3))),
})


def cifar(n, first=0, bad_label=None):
    out = b""
    for s in range(n):
        label = bad_label if bad_label is not None else (first + s) % 10
        out += bytes([label]) + bytes((s * 131 + i * 7) & 0xFF for i in range(3072))
    return out


write("cifar10", {
    "train-2-test-1": pair(cifar(2), cifar(1, 2)),
    "train-only": pair(cifar(1), b""),
    "label-12": pair(cifar(1, bad_label=12), b""),
    "wrong-size": pair(cifar(1) + b"xyz", b""),
})
f4 = struct.pack("<12f", *range(12))
write("npy", {
    "f4-3x2x2-i8-labels": pair(npy("<f4", (3, 2, 2), f4), npy("<i8", (3,), struct.pack("<3q", 0, 1, 2))),
    "u1-labels-v2": pair(npy("|u1", (3, 4), bytes(12), version=2), npy("|u1", (3,), labels3)),
    "f4-y-2-columns": pair(npy("<f4", (3, 2, 2), f4), npy("<f4", (3, 2), struct.pack("<6f", *range(6)))),
    "shape-2-to-56": pair(npy("|u1", (256, 1 << 56), b""), npy("|u1", (256,), bytes(256))),
    "wrapping-to-zero": pair(npy("|u1", (1 << 61, 8), b""), npy("<i8", (1 << 61,), b"")),
    "big-endian": pair(npy(">f4", (3, 2, 2), f4), npy("<i8", (3,), bytes(24))),
})
