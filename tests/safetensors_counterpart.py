#!/usr/bin/env python3
"""The Python side of the safetensors interoperability test (tests/torch_safetensors_test.cpp).

  safetensors_counterpart.py check FILE   parse FILE with nothing but json + numpy, following the public
                                   spec, and check the values the C++ test wrote
  safetensors_counterpart.py write FILE   write FILE the way the Python package lays it out, for C++ to read

Where the `safetensors` package is importable (the GPU machine), `check` also loads the file with
safetensors.numpy.load_file and `write` uses safetensors.numpy.save_file.
"""
import json
import struct
import sys

import numpy as np

DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32,
          "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_}


def expected():
    return {
        "weights": np.arange(24, dtype=np.float32).reshape(2, 3, 4) / 8,
        "counts": np.array([1, -2, 3 << 40], dtype=np.int64),
        "pixels": np.arange(10, dtype=np.uint8),
        "half": np.array([0.5, -1.25], dtype=np.float16),
        "scalar": np.array(3.25, dtype=np.float64),
        "empty": np.zeros((0, 3), dtype=np.int32),
    }


def read_spec(path):
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    assert (8 + n) % 8 == 0, f"header end {8 + n} is not 8-byte aligned"
    header = json.loads(data[8:8 + n].decode("utf-8"))
    buf = data[8 + n:]
    meta = header.pop("__metadata__", {})
    assert all(isinstance(v, str) for v in meta.values()), "metadata values must be strings"
    spans = sorted((v["data_offsets"][0], v["data_offsets"][1], k) for k, v in header.items())
    at = 0
    for begin, end, name in spans:
        assert begin == at, f"{name} starts at {begin}, expected {at}"
        at = end
    assert at == len(buf), f"tensors cover {at} bytes of {len(buf)}"
    out = {}
    for name, v in header.items():
        dt = np.dtype(DTYPES[v["dtype"]]).newbyteorder("<")
        begin, end = v["data_offsets"]
        assert begin % dt.itemsize == 0, f"{name} is not aligned to its element size"
        out[name] = np.frombuffer(buf[begin:end], dtype=dt).reshape(v["shape"])
    return out, meta


def check(path):
    tensors, meta = read_spec(path)
    want = expected()
    assert set(tensors) == set(want), f"names {sorted(tensors)}"
    for k, v in want.items():
        assert tensors[k].shape == v.shape and tensors[k].dtype == v.dtype, k
        assert np.array_equal(tensors[k], v), k
    assert meta == {"step": "1200", "config": '{"lr": 0.1}'}, meta
    try:
        from safetensors.numpy import load_file
    except ImportError:
        return "checked with json+numpy"
    loaded = load_file(path)
    for k, v in want.items():
        assert np.array_equal(loaded[k], v), k
    return "checked with json+numpy and the safetensors package"


def write(path):
    tensors = expected()
    meta = {"step": "1200", "config": '{"lr": 0.1}'}
    try:
        from safetensors.numpy import save_file
        save_file(tensors, path, metadata=meta)
        return "written by the safetensors package"
    except ImportError:
        pass
    # The package's layout: tensors sorted by alignment (descending), then name; header padded to 8.
    order = sorted(tensors, key=lambda k: (-tensors[k].dtype.itemsize, k))
    header, offset = {"__metadata__": meta}, 0
    names = {v: k for k, v in DTYPES.items()}
    for k in order:
        nbytes = tensors[k].nbytes
        header[k] = {"dtype": names[tensors[k].dtype.type], "shape": list(tensors[k].shape),
                     "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - (8 + len(text)) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for k in order:
            f.write(np.ascontiguousarray(tensors[k]).astype(tensors[k].dtype.newbyteorder("<")).tobytes())
    return "written with json+numpy"


if __name__ == "__main__":
    print({"check": check, "write": write}[sys.argv[1]](sys.argv[2]))
