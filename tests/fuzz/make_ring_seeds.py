#!/usr/bin/env python3
"""Writes the seed corpus of the experience_ring_attach fuzz target (corpus/experience_ring_attach):
a small valid segment with one committed slot, then crafted ones that attach or reading must refuse
(a derived field that disagrees with the shape, counts whose products wrap, a head or tail no writer
produces). Input format: segment_input.hpp (a flags byte, the 4096-byte header page, then the
payload's bytes at 2 MiB). Layout: docs/FORMAT.md, "Experience rings". Deterministic; needs
libxxhash (the slot checksum)."""
import ctypes
import pathlib
import struct

HERE = pathlib.Path(__file__).resolve().parent
MIB2 = 2 << 20

xxh = ctypes.CDLL("libxxhash.so.0")
xxh.XXH3_64bits.restype = ctypes.c_uint64
xxh.XXH3_64bits.argtypes = [ctypes.c_char_p, ctypes.c_size_t]


def align(x):
    return (x + 63) // 64 * 64


def layout(actors, slots, steps, envs, obs, kind, adim, logits):
    t, e = steps, envs
    sizes = [4 * (t + 1) * e * obs, 8 * t * e if kind == 1 else 4 * t * e * adim, 4 * t * e, t * e, t * e, 4 * t * e,
             4 * t * e * logits, 4 * (t + 1) * e, 4 * t * e, 4 * t * e, 4 * t * e * obs]
    offsets, cursor, end = [], 64, 64
    for size in sizes:
        offsets.append(cursor)
        end = cursor + size
        cursor = align(end)
    return dict(shape=(actors, slots, steps, envs, obs, kind, adim, logits), max_episodes=t * e, slot_bytes=end,
                slot_stride=cursor, rings=MIB2, slots_offset=MIB2 + 256 * actors, offsets=offsets)


def descriptor(L, **over):
    L = dict(L, **over)
    d = struct.pack("<8I", *L["shape"]) + struct.pack("<II", L["max_episodes"] & 0xFFFFFFFF, L.get("ring_bytes", 256))
    d += struct.pack("<4Q", L["slot_bytes"], L["slot_stride"], L["rings"], L["slots_offset"])
    return d + struct.pack("<11Q", *L["offsets"]) + bytes(32)


def ring_segment(L, head=1, tail=0, **over):
    """One actor's ring with slot 0 committed (seq 0, policy version 7), as the payload at 2 MiB."""
    controls = bytearray(256 * max(L["shape"][0], 1))
    struct.pack_into("<Q", controls, 0, head)
    struct.pack_into("<Q", controls, 64, tail)
    slot = bytearray(min(L["slot_bytes"], 4096))  # crafted giants keep a small payload
    struct.pack_into("<QQ", slot, 8, 0, 7)
    for i in range(L["offsets"][0], L["offsets"][0] + 8):
        slot[i] = i & 0xFF
    struct.pack_into("<Q", slot, 0, xxh.XXH3_64bits(bytes(slot[8:]), len(slot) - 8))
    header = bytes(64) + descriptor(L, **over)
    return bytes([0x13]) + header + bytes(4096 - len(header)) + bytes(controls) + bytes(slot)


SMALL = layout(1, 2, 2, 1, 2, 1, 1, 2)
WRAP = layout(1, 2, 1 << 20, 1 << 20, 1, 1, 1, 1)
SEEDS = {
    "valid": ring_segment(SMALL),
    "head-past-the-ring": ring_segment(SMALL, head=3),
    "tail-past-head": ring_segment(SMALL, head=0, tail=1),
    "slot-stride-off-by-64": ring_segment(SMALL, slot_stride=SMALL["slot_stride"] + 64),
    "observations-at-zero": ring_segment(SMALL, offsets=[0] + SMALL["offsets"][1:]),
    "slots-past-the-end": ring_segment(dict(SMALL, shape=(1, 65536) + SMALL["shape"][2:])),
    "steps-times-envs-wraps": ring_segment(WRAP),
    "slots-offset-wraps": ring_segment(SMALL, slots_offset=2**64 - 64),
    "discrete-action-dim-2": ring_segment(dict(SMALL, shape=SMALL["shape"][:6] + (2, 2))),
    "actors-zero": ring_segment(dict(SMALL, shape=(0,) + SMALL["shape"][1:])),
}

if __name__ == "__main__":
    folder = HERE / "corpus" / "experience_ring_attach"
    folder.mkdir(parents=True, exist_ok=True)
    for seed_name, data in SEEDS.items():
        (folder / seed_name).write_bytes(data)
