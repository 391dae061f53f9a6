#!/usr/bin/env python3
"""Read the latest complete version of a Tandem weight slab with numpy only (docs/FORMAT.md, "Weight slab").

    read_slab.py tandem.<job>.weights            # print the table and the latest version
    read_slab.py tandem.<job>.weights --verify   # also check the bench's verify pattern
    read_slab.py tandem.<job>.weights --save out.npz

The reader takes no lease: it follows the seqlock protocol (seq even, copy, seq unchanged) and
retries when the writer overwrote the slot meanwhile. Correct on x86-64, whose loads are not
reordered with each other (numpy's copies and the 8-byte field reads are plain loads).
"""
import argparse
import mmap
import os
import struct
import sys
import time

import numpy as np

MAGIC = 0x004D4853444E4154
KIND_WEIGHTS = 2
LAYOUT_VERSION = 1
DESCRIPTOR = 64
DTYPES = {1: "uint8", 2: "int8", 3: "int16", 4: "int32", 5: "int64", 6: "float16", 7: "float32", 8: "float64",
          9: "uint16", 10: "uint32", 11: "bfloat16"}


def u64(buf, off):
    return struct.unpack_from("<Q", buf, off)[0]


class Slab:
    def __init__(self, name):
        fd = os.open("/dev/shm/" + name.lstrip("/"), os.O_RDONLY)
        try:
            self.mm = mmap.mmap(fd, 0, prot=mmap.PROT_READ)
        finally:
            os.close(fd)
        m = self.mm
        magic, kind, layout = struct.unpack_from("<QII", m, 0)
        if magic != MAGIC or kind != KIND_WEIGHTS or layout != LAYOUT_VERSION:
            sys.exit(f"{name}: not a layout-{LAYOUT_VERSION} weight slab (magic {magic:#x}, kind {kind}, layout {layout})")
        if struct.unpack_from("<I", m, 56)[0] != 1:
            sys.exit(f"{name}: not ready yet")
        d = DESCRIPTOR
        self.model = m[d:d + 64].split(b"\0")[0].decode()
        self.signature, _, self.publish_dtype, self.num_slots, self.num_leases, self.num_tensors = \
            struct.unpack_from("<QQIIII", m, d + 64)
        (self.slot_bytes, self.slot_stride, self.control_offset, self.lease_offset, self.lease_bytes,
         self.table_offset, self.slots_offset) = struct.unpack_from("<7Q", m, d + 96)
        self.tensors = []
        for i in range(self.num_tensors):
            e = self.table_offset + 248 * i
            tname = m[e:e + 160].split(b"\0")[0].decode()
            dtype, ndim = struct.unpack_from("<II", m, e + 160)
            shape = struct.unpack_from(f"<{ndim}Q", m, e + 168)
            offset, nbytes = struct.unpack_from("<QQ", m, e + 232)
            self.tensors.append((tname, DTYPES[dtype], tuple(shape), offset, nbytes))
        self.bytes = np.frombuffer(m, dtype=np.uint8)

    def slot_header(self, slot):
        return self.control_offset + 64 + 64 * slot

    def latest(self):
        word = u64(self.mm, self.control_offset)
        return word >> 8, word & 0xFF

    def read_latest(self, attempts=1000):
        """(version, step, payload copy) of the newest complete version; None before the first publish."""
        for _ in range(attempts):
            version, slot = self.latest()
            if version == 0:
                return None
            h = self.slot_header(slot)
            seq1 = u64(self.mm, h)
            if seq1 & 1:
                continue                                  # being written: read `latest` again
            got_version, step, nbytes = u64(self.mm, h + 8), u64(self.mm, h + 16), u64(self.mm, h + 24)
            start = self.slots_offset + slot * self.slot_stride
            payload = self.bytes[start:start + nbytes].copy()
            if u64(self.mm, h) == seq1 and got_version != 0:
                return got_version, step, payload        # seq unchanged: one complete version
        raise RuntimeError("the writer kept overwriting the slot being read")

    def tensor(self, payload, name):
        for tname, dtype, shape, offset, nbytes in self.tensors:
            if tname == name:
                raw = payload[offset:offset + nbytes]
                if dtype == "bfloat16":                   # numpy has no bfloat16: widen to float32
                    return (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32).reshape(shape)
                return raw.view(dtype).reshape(shape)
        raise KeyError(name)


def verify_byte(version):
    return (version * 131 + 7) % 251 + 1


def check_verify_pattern(payload, version):
    return (payload[:8].view("<u8")[0] == version and payload[-8:].view("<u8")[0] == version
            and bool(np.all(payload[8:-8] == verify_byte(version))))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("name")
    ap.add_argument("--verify", action="store_true", help="check the verify pattern of tandem bench publish")
    ap.add_argument("--wait", type=float, default=0, help="seconds to wait for a first version")
    ap.add_argument("--save", help="write every tensor to this .npz file")
    args = ap.parse_args()
    slab = Slab(args.name)
    print(f"model {slab.model!r} signature {slab.signature:016x}, {slab.num_slots} slots of {slab.slot_bytes} bytes, "
          f"{slab.num_tensors} tensors")
    deadline = time.monotonic() + args.wait
    got = slab.read_latest()
    while got is None and time.monotonic() < deadline:
        time.sleep(0.01)
        got = slab.read_latest()
    if got is None:
        sys.exit(f"{args.name}: nothing published yet")
    version, step, payload = got
    print(f"version {version} step {step} bytes {len(payload)}")
    if args.verify:
        if not check_verify_pattern(payload, version):
            sys.exit(f"version {version}: TORN (the verify pattern does not match)")
        print(f"version {version}: verify pattern ok")
    if args.save:
        np.savez(args.save, **{t[0]: slab.tensor(payload, t[0]) for t in slab.tensors})


if __name__ == "__main__":
    main()
