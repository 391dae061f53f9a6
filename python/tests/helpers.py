"""What the `tandem` package's tests share: the C++ counterpart process, Python child processes, /dev/shm."""

import json
import os
import pathlib
import select
import signal
import subprocess
import sys
import textwrap
import time

import torch

SESSION = f"py{os.getpid()}"
ROOT = pathlib.Path(__file__).resolve().parents[2]
COUNTERPART = os.environ.get("TANDEM_PY_COUNTERPART", str(ROOT / "build/python/tests/tandem-py-counterpart"))


def status(job):
    """`tandem status JOB --json`: the job's processes as the launcher shows them."""
    out = subprocess.run([os.environ.get("TANDEM_BINARY", str(ROOT / "build/tools/tandem")), "status", job, "--json"],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def shm_names():
    """This session's objects in /dev/shm."""
    return {n for n in os.listdir("/dev/shm") if n.startswith((f"tandem.{SESSION}", f"tandem.data.{SESSION}"))}


def read_line(p, timeout):
    """The next line `p` wrote to stdout, read straight from the pipe: a buffered readline after select()
    could swallow a second line that arrived together with the first and then wait for ever. None at EOF."""
    buf = p.__dict__.setdefault("_line_buffer", bytearray())
    fd = p.stdout.fileno()
    deadline = time.monotonic() + timeout
    while b"\n" not in buf:
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            raise TimeoutError(f"no line in {timeout} s")
        chunk = os.read(fd, 65536)
        if not chunk:
            return None
        buf += chunk
    line, _, rest = bytes(buf).partition(b"\n")
    buf[:] = rest
    return line.decode()


class Peer:
    """tandem-py-counterpart SUBCOMMAND ARGS...: JSON lines out, command lines in."""

    def __init__(self, *args):
        self.p = subprocess.Popen([COUNTERPART, *map(str, args)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)

    def line(self, timeout=60):
        try:
            text = read_line(self.p, timeout)
        except TimeoutError:
            self.p.kill()
            raise TimeoutError(f"the counterpart said nothing in {timeout} s; stderr: {self.p.stderr.read()}")
        if text is None:
            self.p.wait()
            raise RuntimeError(f"the counterpart exited ({self.p.returncode}): {self.p.stderr.read()}")
        return json.loads(text)

    def send(self, text):
        self.p.stdin.write(text + "\n")
        self.p.stdin.flush()

    def finish(self, timeout=60):
        """Closes stdin (the counterpart's "quit") and checks it exited 0."""
        if self.p.stdin and not self.p.stdin.closed:
            self.p.stdin.close()
        rc = self.p.wait(timeout)
        assert rc == 0, f"counterpart exited {rc}: {self.p.stderr.read()}"

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        """After a failure: asks the counterpart to quit (so it removes what it created), kills it if it does not."""
        if self.p.poll() is None:
            try:
                self.p.stdin.close()
                self.p.wait(5)
            except (OSError, subprocess.TimeoutExpired):
                self.p.kill()
                self.p.wait()


def python_child(code, env=None, **kwargs):
    """A Python process running `code` with this interpreter and the package as built; `env` adds
    variables (None removes one)."""
    full_env = {k: v for k, v in dict(os.environ, **(env or {})).items() if v is not None}
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=full_env, **kwargs)


def child_line(p, timeout=60):
    text = read_line(p, timeout)
    assert text is not None, f"the child exited ({p.wait()}): {p.stderr.read()}"
    return text.strip()


def kill(p):
    os.kill(p.pid, signal.SIGKILL)
    p.wait()


class CounterpartModel(torch.nn.Module):
    """tandem-py-counterpart's CounterpartModel: the same names, dtypes and shapes, so the same signature."""

    def __init__(self, d_in=64, d_out=32):
        super().__init__()
        self.layer = torch.nn.Linear(d_in, d_out)
        self.register_buffer("steps", torch.zeros(3, dtype=torch.long))


def mapping_of(ptr):
    """The path of this process's mapping that holds address `ptr` ('' when none)."""
    for line in open("/proc/self/maps"):
        fields = line.split()
        lo, hi = (int(v, 16) for v in fields[0].split("-"))
        if lo <= ptr < hi:
            return fields[5] if len(fields) > 5 else ""
    return ""


def flat_bytes(model):
    """A flattened model's whole flat buffer (uint8), from any of its tensors."""
    import tandem
    return tandem._tandem._testing.storage_bytes(next(iter(model.parameters())))


def refused(error_class, call, *phrases, leaves_nothing_of=None):
    """Runs `call`, which must raise `error_class` (a tandem.Error) with a one-line message holding every
    phrase and none of pybind's signature listing; with `leaves_nothing_of`, /dev/shm must hold no
    object whose name contains it afterwards. Returns the message."""
    import pytest
    import tandem
    with pytest.raises(error_class) as e:
        call()
    message = str(e.value)
    assert isinstance(e.value, tandem.Error), (type(e.value), message)
    assert message and "\n" not in message and "incompatible function arguments" not in message, message
    for p in phrases:
        assert p in message, (p, message)
    if leaves_nothing_of is not None:
        assert not [n for n in os.listdir("/dev/shm") if leaves_nothing_of in n], os.listdir("/dev/shm")
    return message
