#!/usr/bin/env python3
"""Writes the seed corpora of the segment attach targets (corpus/dataset_cache_attach,
weight_slab_attach, control_block_attach, node_group_attach): a small valid segment of each kind, then the hand-made
ones that once crashed the tools (sizes that wrap, offsets outside the mapping, a `latest` naming a
slot that does not exist). Input format: segment_input.hpp (a flags byte, the 4096-byte header page,
then the payload's bytes). Layouts: docs/FORMAT.md. Deterministic: rerunning it rewrites the same
files. Needs libxxhash (the weight slab's tensor table checksum)."""
import ctypes
import pathlib
import struct

HERE = pathlib.Path(__file__).resolve().parent
MIB2 = 2 << 20
U8, F32 = 1, 7

xxh = ctypes.CDLL("libxxhash.so.0")
xxh.XXH3_64bits.restype = ctypes.c_uint64
xxh.XXH3_64bits.argtypes = [ctypes.c_char_p, ctypes.c_size_t]


def seed(flags: int, descriptor: bytes, payload: bytes = b"") -> bytes:
    # The target signs the header (flags bit 0) and sets payload_offset (bit 1); only the descriptor matters.
    header = bytes(64) + descriptor
    return bytes([flags]) + header + bytes(4096 - len(header)) + payload


def name(text: str, size: int) -> bytes:
    return text.encode().ljust(size, b"\0")


# ---- dataset cache: x u8[4] at 2 MiB, y u8 scalar at 4 MiB, 10 samples, train [0, 8), test [8, 10)
def field(fname, dtype, shape, offset, stride, nbytes, ndim=None):
    dims = list(shape) + [0] * (4 - len(shape))
    return name(fname, 32) + struct.pack("<II4QQQQ", dtype, len(shape) if ndim is None else ndim, *dims,
                                         offset, stride, nbytes)


def dataset(num_samples=10, x=None, y=None, splits=((b"train", 0, 8), (b"test", 8, 10)), num_fields=2):
    x = x or field("x", U8, [4], MIB2, 4, 4 * num_samples)
    y = y or field("y", U8, [], 2 * MIB2, 1, num_samples)
    fields = (x + y).ljust(8 * 96, b"\0")
    sp = b"".join(name(n.decode(), 16) + struct.pack("<QQ", b, e) for n, b, e in splits).ljust(4 * 32, b"\0")
    d = name("fuzz", 64) + name("seed", 256) + name("synthetic", 16)
    d += struct.pack("<QIIQQ", num_samples, num_fields, len(splits), 0, 0) + fields + sp
    return seed(0x13, d, bytes(range(40)))  # 1 extra 2 MiB: room for y at 4 MiB


DATASETS = {
    "valid": dataset(),
    "stride-times-samples-wraps": dataset(2**61, x=field("x", U8, [8], MIB2, 8, 0), y=field("y", U8, [], 2 * MIB2, 1, 2**61)),
    "offset-plus-bytes-wraps": dataset(x=field("x", U8, [4], 2**64 - MIB2, 4, 40)),
    "ndim-past-shape": dataset(x=field("x", U8, [4], MIB2, 4, 40, ndim=1000)),
    "unknown-dtype": dataset(y=field("y", 99, [], 2 * MIB2, 1, 10)),
    "past-the-mapping": dataset(2**40, x=field("x", U8, [4], MIB2, 4, 4 * 2**40), y=field("y", U8, [], 2 * MIB2, 1, 2**40)),
    "train-split-past-end": dataset(splits=((b"train", 0, 75000),)),
    "reversed-split": dataset(splits=((b"train", 5, 3),)),
    "nine-fields": dataset(num_fields=9),
}


# ---- weight slab: 2 slots of 4096 bytes, 8 leases, one f32 tensor; version 1 published in slot 0
def slab(control=MIB2, lease=MIB2 + 4096, lease_bytes=4096, slots=2, latest=(1, 0), slot_bytes_claim=4096):
    table = name("w", 160) + struct.pack("<II8QQQ", F32, 1, 1024, *([0] * 7), 0, 4096)
    d = name("fuzz", 64) + struct.pack("<QQIIII", 0, xxh.XXH3_64bits(table, len(table)), F32, slots, 8, 1)
    d += struct.pack("<7Q", 4096, MIB2, control, lease, lease_bytes, MIB2 + 8192, 2 * MIB2)
    ctl = struct.pack("<5Q", latest[0] << 8 | latest[1], 1, 0, 0, 0).ljust(64, b"\0")
    ctl += struct.pack("<6Q", 2, 1, 1, slot_bytes_claim, 0, 0).ljust(64, b"\0")  # slot 0: seq 2, version 1
    payload = ctl.ljust(4096, b"\0") + bytes(4096) + table
    return seed(0x33, d, payload)  # 3 extra 2 MiB: the slots at 4 MiB and 6 MiB


SLABS = {
    "valid": slab(),
    "lease-bytes-zero": slab(lease_bytes=0),
    "control-offset-out-of-range": slab(control=2**62),
    "control-offset-misaligned": slab(control=MIB2 + 8),
    "num-slots-200": slab(slots=200),
    "latest-slot-200": slab(latest=(1, 200)),
    "slot-claims-2-to-40-bytes": slab(slot_bytes_claim=2**40),
}


# ---- control block: 1 learner and 1 actor
def control(rows=2, learners=1, actors=1, job=b"fuzz"):
    d = struct.pack("<IIIIQQiIQQ", rows, learners, actors, 512, 0, 512, 1, 0, 0, 0)
    d += job.ljust(72, b"\0")[:72] + name("/tmp/run", 1024)
    row = lambda role, index: struct.pack("<IIiIIi", role, index, 0, 0, 0, -1).ljust(512, b"\0")
    return seed(0x03, d, bytes(512) + row(1, 0) + row(2, 0))


CONTROLS = {
    "valid": control(),
    "counts-wrap": control(rows=2, learners=0xFFFFFFFF, actors=3),
    "rows-past-the-end": control(rows=100000, learners=1, actors=99999),
    "unterminated-job": control(job=b"x" * 72),
}


# ---- node reduce group: 2 ranks, 4 KiB per rank and round; lanes at payload 64, buffers at 4096,
# then (with slots) two riders and the slots
def reduce_group(world=2, chunk=4096, data_offset=4096, lanes=b"", slot_bytes=0):
    return seed(0x13, struct.pack("<IIQQQ", world, 0, chunk, data_offset, slot_bytes), lanes)


def lane(arrived=0, pid=0):
    return struct.pack("<QIIQ", arrived, pid, 0, 0).ljust(64, b"\0")


REDUCE_GROUPS = {
    "valid": reduce_group(),
    "valid-rank-0-far-ahead": reduce_group(lanes=bytes(64) + lane(arrived=2**40)),  # the collectives run
    "rank-1-taken": reduce_group(lanes=bytes(64) + lane() + lane(pid=1)),
    "chunk-wraps": reduce_group(chunk=2**62),
    "chunk-not-a-multiple-of-64": reduce_group(chunk=100),
    "data-offset-elsewhere": reduce_group(data_offset=64),
    "buffers-past-the-mapping": reduce_group(chunk=1 << 20),
    "three-ranks": reduce_group(world=3),
    "valid-with-slots": reduce_group(slot_bytes=64 * 1024),
    "valid-with-slots-rank-0-far-ahead": reduce_group(slot_bytes=64 * 1024, lanes=bytes(64) + lane(arrived=2**40)),
    "slots-not-a-multiple-of-64": reduce_group(slot_bytes=100),
    "slots-wrap": reduce_group(slot_bytes=2**63),
    "slots-past-the-mapping": reduce_group(slot_bytes=1 << 20),
}

for target, seeds in (("dataset_cache_attach", DATASETS), ("weight_slab_attach", SLABS),
                      ("control_block_attach", CONTROLS), ("node_group_attach", REDUCE_GROUPS)):
    folder = HERE / "corpus" / target
    folder.mkdir(parents=True, exist_ok=True)
    for seed_name, data in seeds.items():
        (folder / seed_name).write_bytes(data)
