#!/usr/bin/python3
"""Reads a Tandem dataset cache with numpy only, as docs/FORMAT.md describes it.

    /usr/bin/python3 tools/tandem_shm.py NAME                  summary of /dev/shm/tandem.data.NAME
    /usr/bin/python3 tools/tandem_shm.py NAME --json           the same as one JSON object
    /usr/bin/python3 tools/tandem_shm.py NAME --hex FIELD I    sample I of FIELD as hex bytes
    /usr/bin/python3 tools/tandem_shm.py NAME --verify         recompute both checksums (needs `xxhash`)
    /usr/bin/python3 tools/tandem_shm.py --weights SEGMENT [--verify]
                         latest complete version of a weight slab (e.g. tandem.job.weights), read
                         lease-free by the seqlock protocol; --verify checks the bench's pattern
    /usr/bin/python3 tools/tandem_shm.py --exp SEGMENT [--slot A]
                         experience rings (e.g. tandem.job.exp) as JSON: the descriptor and every
                         ring's head and tail, or ring A's slot at tail, each field as hex bytes

As a module: `cache = open_dataset("fmnist")`; `cache.fields["x"]` is a read-only numpy array of
shape (num_samples, *per_sample_shape) mapped straight from shared memory (no copy);
`cache.splits["train"]` is a (begin, end) pair.
"""
import json
import math
import os
import sys

import numpy as np

MAGIC = 0x004D4853444E4154  # b"TANDSHM\0"
HEADER_BYTES = 4096
DESCRIPTOR_OFFSET = 64
PAYLOAD_ALIGNMENT = 2 << 20
KIND_DATASET = 1
DATASET_LAYOUT_VERSION = 1
READY = 1
CHECKSUM_CHUNK = 4 << 20

# The tables of docs/FORMAT.md as numpy record types (little-endian, no padding).
SEGMENT_HEADER = np.dtype([
    ("magic", "<u8"), ("kind", "<u4"), ("layout_version", "<u4"), ("creator_uid", "<u4"),
    ("creator_pid", "<u4"), ("created_unix_ns", "<u8"), ("total_size", "<u8"),
    ("payload_offset", "<u8"), ("header_checksum", "<u8"), ("ready", "<u4"), ("creator_start", "<u4")])
FIELD_DESC = np.dtype([
    ("name", "S32"), ("dtype", "<u4"), ("ndim", "<u4"), ("shape", "<u8", (4,)), ("offset", "<u8"),
    ("stride", "<u8"), ("bytes", "<u8")])
SPLIT_DESC = np.dtype([("name", "S16"), ("begin", "<u8"), ("end", "<u8")])
DATASET_DESCRIPTOR = np.dtype([
    ("name", "S64"), ("source", "S256"), ("format", "S16"), ("num_samples", "<u8"),
    ("num_fields", "<u4"), ("num_splits", "<u4"), ("payload_checksum", "<u8"), ("load_ns", "<u8"),
    ("fields", FIELD_DESC, (8,)), ("splits", SPLIT_DESC, (4,))])
assert (SEGMENT_HEADER.itemsize, FIELD_DESC.itemsize, SPLIT_DESC.itemsize, DATASET_DESCRIPTOR.itemsize) == (64, 96, 32, 1264)

# dtype code -> numpy dtype (bfloat16, code 11, is returned as its raw 16-bit words).
DTYPES = {1: "<u1", 2: "<i1", 3: "<i2", 4: "<i4", 5: "<i8", 6: "<f2", 7: "<f4", 8: "<f8", 9: "<u2", 10: "<u4", 11: "<u2"}
DTYPE_NAMES = {1: "uint8", 2: "int8", 3: "int16", 4: "int32", 5: "int64", 6: "float16", 7: "float32",
               8: "float64", 9: "uint16", 10: "uint32", 11: "bfloat16"}


class CacheError(Exception):
    pass


class DatasetCache:
    def __init__(self, name, path, mapping, header, descriptor, fields, field_info, splits):
        self.name, self.path, self.mapping = name, path, mapping
        self.header, self.descriptor = header, descriptor
        self.fields, self.field_info, self.splits = fields, field_info, splits
        self.num_samples = int(descriptor["num_samples"])

    def summary(self):
        d = self.descriptor
        return {
            "name": self.name,
            "segment": self.path,
            "source": d["source"].decode(),
            "format": d["format"].decode(),
            "num_samples": self.num_samples,
            "payload_checksum": "%016x" % int(d["payload_checksum"]),
            "load_ns": int(d["load_ns"]),
            "fields": self.field_info,
            "splits": {k: list(v) for k, v in self.splits.items()},
        }


def open_dataset(name, shm_dir="/dev/shm"):
    path = os.path.join(shm_dir, "tandem.data." + name)
    if not os.path.exists(path):
        raise CacheError(f"{path} does not exist: run `tandem data preload {name} --from PATH`")
    size = os.path.getsize(path)
    if size < HEADER_BYTES:
        raise CacheError(f"{path} is truncated ({size} bytes, less than its 4096-byte header)")
    m = np.memmap(path, mode="r")
    h = np.frombuffer(m, SEGMENT_HEADER, count=1, offset=0)[0]
    if int(h["magic"]) != MAGIC:
        raise CacheError(f"{path} is not a Tandem segment (bad magic)")
    if int(h["ready"]) != READY:  # read first: on x86-64 this plain load is an acquire load
        raise CacheError(f"{path} is not ready (its creator, pid {int(h['creator_pid'])}, is writing it or died)")
    if int(h["kind"]) != KIND_DATASET or int(h["layout_version"]) != DATASET_LAYOUT_VERSION:
        raise CacheError(f"{path} is kind {int(h['kind'])} layout {int(h['layout_version'])}, "
                         f"this reads a dataset cache (kind 1) of layout {DATASET_LAYOUT_VERSION}")
    if int(h["total_size"]) != size or int(h["payload_offset"]) % PAYLOAD_ALIGNMENT:
        raise CacheError(f"{path} is {size} bytes but its header says {int(h['total_size'])}")

    d = np.frombuffer(m, DATASET_DESCRIPTOR, count=1, offset=DESCRIPTOR_OFFSET)[0]
    n = int(d["num_samples"])
    if not 1 <= int(d["num_fields"]) <= 8 or int(d["num_splits"]) > 4:
        raise CacheError(f"{path} has a bad field or split count")
    fields, info = {}, {}
    for f in d["fields"][: int(d["num_fields"])]:
        fname, code, ndim = f["name"].decode(), int(f["dtype"]), int(f["ndim"])
        shape = tuple(int(s) for s in f["shape"][:ndim])
        if code not in DTYPES:
            raise CacheError(f"{path}: field '{fname}' has unknown dtype code {code}")
        if ndim > 4 or 0 in shape or int(f["stride"]) != np.dtype(DTYPES[code]).itemsize * math.prod(shape):
            raise CacheError(f"{path}: field '{fname}' has a bad shape or stride")
        # Python integers do not wrap, so these sums and products are the exact ones FORMAT.md asks for.
        offset = int(f["offset"])
        if (offset < int(h["payload_offset"]) or offset % PAYLOAD_ALIGNMENT or offset + int(f["bytes"]) > size
                or int(f["bytes"]) != int(f["stride"]) * n):
            raise CacheError(f"{path}: field '{fname}' does not fit the segment")
        fields[fname] = np.ndarray((n,) + shape, dtype=DTYPES[code], buffer=m, offset=int(f["offset"]))
        info[fname] = {"dtype": DTYPE_NAMES[code], "shape": list(shape), "offset": int(f["offset"]),
                       "stride": int(f["stride"]), "bytes": int(f["bytes"])}
    splits = {s["name"].decode(): (int(s["begin"]), int(s["end"])) for s in d["splits"][: int(d["num_splits"])]}
    for sname, (begin, end) in splits.items():
        if not begin <= end <= n:
            raise CacheError(f"{path}: split '{sname}' [{begin}, {end}) is not a range within its {n} samples")
    return DatasetCache(name, path, m, h, d, fields, info, splits)


def verify(cache):
    """Recomputes header_checksum and payload_checksum (docs/FORMAT.md); needs the xxhash package."""
    try:
        import xxhash  # not part of numpy: optional
    except ImportError:
        raise CacheError("--verify needs the xxhash package: apt-get install python3-xxhash (or pip install xxhash)")
    raw = bytes(cache.mapping[:HEADER_BYTES])
    if xxhash.xxh3_64_intdigest(raw[0:48] + raw[64:HEADER_BYTES]) != int(cache.header["header_checksum"]):
        raise CacheError(f"{cache.path}: header checksum mismatch")
    digests = bytearray()
    for f in cache.field_info.values():
        arr = cache.mapping[f["offset"]: f["offset"] + f["bytes"]]
        for i in range(0, len(arr), CHECKSUM_CHUNK):
            digests += xxhash.xxh3_64_intdigest(arr[i:i + CHECKSUM_CHUNK]).to_bytes(8, "little")
    if xxhash.xxh3_64_intdigest(bytes(digests)) != int(cache.descriptor["payload_checksum"]):
        raise CacheError(f"{cache.path}: payload checksum mismatch")


# ---- weight slab (docs/FORMAT.md, "Weight slab") ------------------------------------------------
KIND_WEIGHTS = 2
KIND_WEIGHTS_CUDA = 5  # the device slab: same layout, slots in GPU memory (docs/FORMAT.md, "Device slab")
WEIGHTS_LAYOUT_VERSION = 1
DEVICE_SLAB_INFO_OFFSET = 64 + 256
DEVICE_SLAB_INFO = np.dtype([("ipc_handle", "u1", (64,)), ("gpu_uuid", "u1", (16,)), ("pci_bus_id", "S32"),
                             ("buffer_bytes", "<u8"), ("exporter_pid", "<u8")])
assert DEVICE_SLAB_INFO.itemsize == 128
SLAB_DESCRIPTOR = np.dtype([
    ("model", "S64"), ("model_signature", "<u8"), ("table_checksum", "<u8"), ("publish_dtype", "<u4"),
    ("num_slots", "<u4"), ("num_leases", "<u4"), ("num_tensors", "<u4"), ("slot_bytes", "<u8"),
    ("slot_stride", "<u8"), ("control_offset", "<u8"), ("lease_offset", "<u8"), ("lease_bytes", "<u8"),
    ("table_offset", "<u8"), ("slots_offset", "<u8")])
TENSOR_ENTRY = np.dtype([("name", "S160"), ("dtype", "<u4"), ("ndim", "<u4"), ("shape", "<u8", (8,)),
                         ("offset", "<u8"), ("bytes", "<u8")])
assert (SLAB_DESCRIPTOR.itemsize, TENSOR_ENTRY.itemsize) == (152, 248)


class WeightSlab:
    """A weight slab mapped read-only. read_latest() follows the seqlock protocol; no lease is taken."""

    def __init__(self, segment, shm_dir="/dev/shm"):
        path = os.path.join(shm_dir, segment.lstrip("/"))
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            raise CacheError(f"{path} does not exist: start the learner that publishes it, or check the job name")
        try:
            self.mapping = np.memmap(path, dtype=np.uint8, mode="r")
        finally:
            os.close(fd)
        m = self.mapping
        h = np.frombuffer(m[:64].tobytes(), SEGMENT_HEADER)[0]
        kind = int(h["kind"])
        if int(h["magic"]) != MAGIC or kind not in (KIND_WEIGHTS, KIND_WEIGHTS_CUDA) or \
                int(h["layout_version"]) != WEIGHTS_LAYOUT_VERSION:
            raise CacheError(f"{path} is not a layout-{WEIGHTS_LAYOUT_VERSION} weight slab")
        self.device = None  # a device slab's export record: its slots are GPU memory, not in this file
        if kind == KIND_WEIGHTS_CUDA:
            at = DEVICE_SLAB_INFO_OFFSET
            self.device = np.frombuffer(m[at:at + DEVICE_SLAB_INFO.itemsize].tobytes(), DEVICE_SLAB_INFO)[0]
        if int(h["ready"]) != READY:
            raise CacheError(f"{path} is not ready")
        self.d = np.frombuffer(m[DESCRIPTOR_OFFSET:DESCRIPTOR_OFFSET + SLAB_DESCRIPTOR.itemsize].tobytes(), SLAB_DESCRIPTOR)[0]
        t0, n = int(self.d["table_offset"]), int(self.d["num_tensors"])
        self.table = np.frombuffer(m[t0:t0 + n * TENSOR_ENTRY.itemsize].tobytes(), TENSOR_ENTRY)
        self.words = m[:int(self.d["table_offset"])].view("<u8")  # control block and slot headers as u64 words

    def _u64(self, offset):
        return int(self.words[offset // 8])  # one aligned 8-byte load

    def read_latest(self, attempts=1000):
        """(version, step, payload copy) of the newest complete version, or None before the first publish."""
        if self.device is not None:
            raise CacheError("a device slab's slots are GPU memory: read them through CUDA IPC, or read the host slab")
        control = int(self.d["control_offset"])
        for _ in range(attempts):
            latest = self._u64(control)
            if latest == 0:
                return None
            slot = latest & 0xFF
            if slot >= int(self.d["num_slots"]):
                raise CacheError(f"`latest` names slot {slot} of {int(self.d['num_slots'])}: the slab is corrupt")
            h = control + 64 + 64 * slot
            seq = self._u64(h)
            if seq & 1:
                continue  # being rewritten: read `latest` again
            version, step, nbytes = self._u64(h + 8), self._u64(h + 16), self._u64(h + 24)
            if nbytes > int(self.d["slot_bytes"]):
                continue  # torn header or corrupt: the seq check below would fail it anyway
            start = int(self.d["slots_offset"]) + slot * int(self.d["slot_stride"])
            payload = np.array(self.mapping[start:start + nbytes])
            if self._u64(h) == seq and version != 0:
                return version, step, payload  # seq unchanged: exactly that version, complete
        raise CacheError("the writer kept overwriting the slot being read")

    def tensor(self, payload, name):
        for e in self.table:
            if e["name"].decode() == name:
                raw = payload[int(e["offset"]):int(e["offset"]) + int(e["bytes"])]
                shape = tuple(int(x) for x in e["shape"][:int(e["ndim"])])
                if int(e["dtype"]) == 11:  # bfloat16: the upper half of a float32
                    return (raw.view("<u2").astype("<u4") << 16).view("<f4").reshape(shape)
                return raw.view(DTYPES[int(e["dtype"])]).reshape(shape)
        raise KeyError(name)


def verify_byte(version):
    return (version * 131 + 7) % 251 + 1


def check_verify_pattern(payload, version):
    """The pattern of `tandem bench publish --verify` (docs/FORMAT.md): False means a torn copy."""
    return (int(payload[:8].view("<u8")[0]) == version and int(payload[-8:].view("<u8")[0]) == version
            and bool(np.all(payload[8:-8] == verify_byte(version))))


def weights_main(argv):
    slab = WeightSlab(argv[2])
    d = slab.d
    print(f"model {d['model'].decode()!r} signature {int(d['model_signature']):016x}, {int(d['num_slots'])} slots "
          f"of {int(d['slot_bytes'])} bytes, {int(d['num_tensors'])} tensors")
    if slab.device is not None:
        dev, control = slab.device, int(d["control_offset"])
        print(f"device slab on GPU {dev['pci_bus_id'].decode()} (uuid {bytes(dev['gpu_uuid']).hex()}), exported by pid "
              f"{int(dev['exporter_pid'])}, {int(dev['buffer_bytes'])} bytes; latest version {slab._u64(control) >> 8}")
        return 0
    got = slab.read_latest()
    if got is None:
        raise CacheError(f"{argv[2]}: nothing published yet")
    version, step, payload = got
    print(f"version {version} step {step} bytes {len(payload)}")
    if "--verify" in argv:
        if not check_verify_pattern(payload, version):
            raise CacheError(f"version {version}: TORN (the verify pattern does not match)")
        print(f"version {version}: verify pattern ok")
    return 0


# ---- experience rings (docs/FORMAT.md, "Experience rings") ----
KIND_EXPERIENCE = 3
EXPERIENCE_LAYOUT_VERSION = 2
EXPERIENCE_DESCRIPTOR = np.dtype(
    [(n, "<u4") for n in ("num_actors", "slots_per_ring", "steps", "envs", "obs_dim", "action_kind", "action_dim",
                          "logits_dim", "max_episodes", "ring_bytes")]
    + [(n, "<u8") for n in ("slot_bytes", "slot_stride", "rings_offset", "slots_offset", "observations_offset",
                            "actions_offset", "rewards_offset", "terminated_offset", "truncated_offset",
                            "log_probs_offset", "logits_offset", "values_offset", "episode_returns_offset",
                            "episode_lengths_offset", "final_observations_offset")]
    + [("reserved", "<u8", (4,))])
EXP_SLOT_HEADER = np.dtype([("checksum", "<u8"), ("seq", "<u8"), ("policy_version", "<u8"), ("episodes", "<u4"),
                            ("reserved0", "<u4"), ("reserved", "<u8", (4,))])
assert (EXPERIENCE_DESCRIPTOR.itemsize, EXP_SLOT_HEADER.itemsize) == (192, 64)


class ExperienceRings:
    """Experience rings mapped read-only: ring(a) gives head and tail, slot(a, i) numpy views of a slot."""

    def __init__(self, segment, shm_dir="/dev/shm"):
        path = os.path.join(shm_dir, segment.lstrip("/"))
        if not os.path.exists(path):
            raise CacheError(f"{path} does not exist: the learner creates it; check the job name")
        self.mapping = m = np.memmap(path, dtype=np.uint8, mode="r")
        h = np.frombuffer(m[:64].tobytes(), SEGMENT_HEADER)[0]
        if int(h["magic"]) != MAGIC or int(h["kind"]) != KIND_EXPERIENCE or int(h["layout_version"]) != EXPERIENCE_LAYOUT_VERSION:
            raise CacheError(f"{path} is not a layout-{EXPERIENCE_LAYOUT_VERSION} experience ring segment")
        if int(h["ready"]) != READY:
            raise CacheError(f"{path} is not ready")
        self.d = {k: int(v) if k != "reserved" else v for k, v in zip(
            EXPERIENCE_DESCRIPTOR.names, np.frombuffer(m[64:64 + EXPERIENCE_DESCRIPTOR.itemsize].tobytes(), EXPERIENCE_DESCRIPTOR)[0])}
        d = self.d
        end = d["slots_offset"] + d["num_actors"] * d["slots_per_ring"] * d["slot_stride"]
        if d["num_actors"] == 0 or d["slots_per_ring"] == 0 or end > len(m) or d["slot_bytes"] > d["slot_stride"]:
            raise CacheError(f"{path}: the descriptor does not fit the segment")

    def ring(self, actor):
        base = self.d["rings_offset"] + 256 * actor
        words = self.mapping[base:base + 128].view("<u8")  # aligned 8-byte loads
        return {"head": int(words[0]), "tail": int(words[8]), "full_waits": int(words[1]), "refused": int(words[9])}

    def shapes(self):
        d = self.d
        t, e = d["steps"], d["envs"]
        discrete = d["action_kind"] == 1
        return {"observations": ("<f4", [t + 1, e, d["obs_dim"]]),
                "actions": ("<i8", [t, e]) if discrete else ("<f4", [t, e, d["action_dim"]]),
                "rewards": ("<f4", [t, e]), "terminated": ("<u1", [t, e]), "truncated": ("<u1", [t, e]),
                "log_probs": ("<f4", [t, e]), "logits": ("<f4", [t, e, d["logits_dim"]]),
                "values": ("<f4", [t + 1, e]), "episode_returns": ("<f4", [d["max_episodes"]]),
                "episode_lengths": ("<u4", [d["max_episodes"]]),
                "final_observations": ("<f4", [t, e, d["obs_dim"]])}

    def slot(self, actor, index):
        """(header, {field: read-only array}) of ring `actor`'s slot for sequence number `index`; no copy."""
        d = self.d
        start = d["slots_offset"] + (actor * d["slots_per_ring"] + index % d["slots_per_ring"]) * d["slot_stride"]
        raw = self.mapping[start:start + d["slot_bytes"]]
        header = np.frombuffer(raw[:64].tobytes(), EXP_SLOT_HEADER)[0]
        fields = {}
        for name, (dtype, shape) in self.shapes().items():
            off = d[name + "_offset"]
            count = int(np.prod(shape))
            fields[name] = raw[off:off + count * np.dtype(dtype).itemsize].view(dtype).reshape(shape)
        return header, fields

    def slot_checksum_ok(self, actor, index):
        import xxhash
        d = self.d
        start = d["slots_offset"] + (actor * d["slots_per_ring"] + index % d["slots_per_ring"]) * d["slot_stride"]
        raw = self.mapping[start:start + d["slot_bytes"]]
        return xxhash.xxh3_64_intdigest(raw[8:].tobytes()) == int(raw[:8].view("<u8")[0])


def experience_main(argv):
    """--exp SEGMENT [--slot A]: the descriptor and rings, or ring A's slot at tail as hex per field."""
    rings = ExperienceRings(argv[2])
    out = {"descriptor": {k: v for k, v in rings.d.items() if k != "reserved"},
           "rings": [rings.ring(a) for a in range(rings.d["num_actors"])]}
    if "--slot" in argv:
        actor = int(argv[argv.index("--slot") + 1])
        ring = rings.ring(actor)
        if ring["tail"] >= ring["head"]:
            raise CacheError(f"ring {actor} has no committed slot past tail {ring['tail']}")
        header, fields = rings.slot(actor, ring["tail"])
        out = {"ring": ring, "seq": int(header["seq"]), "policy_version": int(header["policy_version"]),
               "episodes": int(header["episodes"])}
        try:
            out["checksum_ok"] = rings.slot_checksum_ok(actor, ring["tail"])
        except ImportError:
            pass
        for name, array in fields.items():
            if name.startswith("episode_"):
                array = array[:out["episodes"]]
            out[name] = np.ascontiguousarray(array).tobytes().hex()
            out["shape_" + name] = list(array.shape)
    print(json.dumps(out))
    return 0


def main(argv):
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        print(__doc__)
        return 2
    try:
        if argv[1] == "--weights" and len(argv) > 2:
            return weights_main(argv)
        if argv[1] == "--exp" and len(argv) > 2:
            return experience_main(argv)
        cache = open_dataset(argv[1])
        if "--json" in argv:
            print(json.dumps(cache.summary(), sort_keys=True))
        elif "--hex" in argv:
            at = argv.index("--hex")
            field, index = argv[at + 1], int(argv[at + 2])
            print(np.ascontiguousarray(cache.fields[field][index]).tobytes().hex())
        elif "--verify" in argv:
            verify(cache)
            print(f"{cache.name}: header and payload checksums match")
        else:
            s = cache.summary()
            print(f"{s['name']}: {s['num_samples']} samples from {s['source']} ({s['format']})")
            for fname, f in s["fields"].items():
                print(f"  field {fname}: {f['dtype']} {tuple(f['shape'])}")
            for sname, (b, e) in s["splits"].items():
                print(f"  split {sname}: {e - b} samples [{b}, {e})")
    except CacheError as e:
        print(f"tandem_shm.py: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
