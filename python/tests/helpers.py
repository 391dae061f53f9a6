"""What the `tandem` package's tests share: the C++ peer process, Python child processes, /dev/shm."""

import json
import os
import pathlib
import select
import signal
import subprocess
import sys
import textwrap

import torch

SESSION = f"py{os.getpid()}"
ROOT = pathlib.Path(__file__).resolve().parents[2]
PEER = os.environ.get("TANDEM_PY_PEER", str(ROOT / "build/python/tests/tandem-py-peer"))


def shm_names():
    """This session's objects in /dev/shm."""
    return {n for n in os.listdir("/dev/shm") if n.startswith((f"tandem.{SESSION}", f"tandem.data.{SESSION}"))}


class Peer:
    """tandem-py-peer SUBCOMMAND ARGS...: JSON lines out, command lines in."""

    def __init__(self, *args):
        self.p = subprocess.Popen([PEER, *map(str, args)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)

    def line(self, timeout=60):
        ready, _, _ = select.select([self.p.stdout], [], [], timeout)
        if not ready:
            self.p.kill()
            raise TimeoutError(f"the peer said nothing in {timeout} s; stderr: {self.p.stderr.read()}")
        text = self.p.stdout.readline()
        if not text:
            self.p.wait()
            raise RuntimeError(f"the peer exited ({self.p.returncode}): {self.p.stderr.read()}")
        return json.loads(text)

    def send(self, text):
        self.p.stdin.write(text + "\n")
        self.p.stdin.flush()

    def finish(self, timeout=60):
        """Closes stdin (the peer's "quit") and checks it exited 0."""
        if self.p.stdin and not self.p.stdin.closed:
            self.p.stdin.close()
        rc = self.p.wait(timeout)
        assert rc == 0, f"peer exited {rc}: {self.p.stderr.read()}"

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait()


def python_child(code, env=None, **kwargs):
    """A Python process running `code` with this interpreter and the package as built; `env` adds
    variables (None removes one)."""
    full_env = {k: v for k, v in dict(os.environ, **(env or {})).items() if v is not None}
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=full_env, **kwargs)


def child_line(p, timeout=60):
    ready, _, _ = select.select([p.stdout], [], [], timeout)
    assert ready, f"the child said nothing in {timeout} s"
    text = p.stdout.readline()
    assert text, f"the child exited ({p.wait()}): {p.stderr.read()}"
    return text.strip()


def kill(p):
    os.kill(p.pid, signal.SIGKILL)
    p.wait()


class PeerModel(torch.nn.Module):
    """tandem-py-peer's PeerModel: the same names, dtypes and shapes, so the same signature."""

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
