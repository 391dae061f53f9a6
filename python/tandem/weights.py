"""The weight slab /dev/shm/tandem.<job>.weights: WeightPublisher (one writer) and WeightFollower (readers).

A publisher flattens the model's parameters and buffers into one buffer (they stay the same
Parameter objects, now views of it) and publishes a version with one copy of that buffer: on a GPU a
device-to-device snapshot on the current stream, after which ``publish()`` returns and a C++ thread
copies the snapshot into the slab and commits it (training waits for the snapshot only). On the CPU,
given the ``optimizer`` (or ``overlap=True``), ``publish()`` hands a free slot to a C++ copier thread
and returns; the copy runs during the next forward and backward, and the optimizer's step first
waits for it (``wait_before_update()``), so the published bytes are the weights at the call. Without
either, the CPU copy runs inside ``publish()``. Readers never see a torn version (seqlock per slot) and may lease a
slot to keep its bytes stable while they use them. Python and C++ sides interoperate both ways.
"""

from __future__ import annotations

import os
import warnings
from typing import Dict, Iterable, List, NamedTuple, Optional, Tuple, Union

import torch

from . import _args, _tandem
from .errors import Error

__all__ = ["WeightPublisher", "WeightFollower", "Lease", "TensorInfo", "slab_name"]

Model = Union[torch.nn.Module, Dict[str, torch.Tensor], Iterable[Tuple[str, torch.Tensor]]]


def slab_name(job: Optional[str] = None) -> str:
    """``tandem.<job>.weights``, the job's weight slab; ``job`` defaults to $TANDEM_JOB (set by ``tandem run``)."""
    if job is None:
        job = os.environ.get("TANDEM_JOB")
        if not job:
            raise Error("no job named: pass job= (or slab=), or run under `tandem run`, which sets TANDEM_JOB")
    return _tandem.job_segment_name(_args.text("job", job), "weights")


class WeightPublisher:
    """Publishes ``model``'s weights into the job's slab, which it creates (and removes on close).

    ``model`` is a ``torch.nn.Module`` or named tensors (a dict, or (name, tensor) pairs); its tensors are
    flattened in place at construction. ``bf16`` publishes float32 tensors as bfloat16 (half the
    bytes). ``device_slab`` (a CUDA model) also publishes into ``<slab>.cuda`` for readers on the same
    GPU (CUDA IPC). A slab left by a writer that has exited is replaced; one whose writer runs is a
    SegmentExistsError. ``persist`` keeps the slab after close (default: under ``tandem run``, as the
    C++ learner does, so actors still evaluate the final version; the launcher removes it at the end).
    ``optimizer``: a CPU publish overlaps training and every ``optimizer.step()`` first waits for the
    copy (a step pre-hook; on torch < 2.0 the instance's ``step`` is wrapped). ``overlap=True`` without
    an optimizer: the same, and the caller calls ``wait_before_update()`` before changing the weights.
    BatchNorm running statistics, which the forward pass updates in place, may then be published from
    the next step. Publish from the training thread.
    """

    def __init__(self, model: Model, job: Optional[str] = None, *, slab: Optional[str] = None,
                 model_name: str = "model", bf16: bool = False, slots: int = 4, leases: int = 256,
                 device_slab: bool = False, after_version: int = 0, replace_dead_writer: bool = True,
                 persist: Optional[bool] = None, optimizer: Optional[torch.optim.Optimizer] = None,
                 overlap: Optional[bool] = None):
        named = _args.named_tensors("WeightPublisher model", model)
        if optimizer is not None and not isinstance(optimizer, torch.optim.Optimizer):
            raise Error(f"WeightPublisher optimizer={type(optimizer).__name__} is not a torch.optim.Optimizer: pass "
                        f"the optimizer that steps this model, or overlap=True and call wait_before_update() yourself")
        o = _tandem.PublisherOptions()
        o.model = _args.text("WeightPublisher model_name", model_name)
        o.bf16 = bool(bf16)
        o.slots = _args.limited("WeightPublisher slots", slots, "slab_slots")
        o.leases = _args.limited("WeightPublisher leases", leases, "slab_leases")
        o.device_slab = bool(device_slab)
        o.after_version = _args.limited("WeightPublisher after_version", after_version, "slab_version")
        o.replace_dead_writer = bool(replace_dead_writer)
        o.persist = bool(os.environ.get("TANDEM_JOB")) if persist is None else bool(persist)
        o.overlap = optimizer is not None if overlap is None else bool(overlap)
        name = _args.text("WeightPublisher slab", slab) if slab is not None else slab_name(job)
        self._c = _tandem.WeightPublisher(named, _args.owners(model), name, o)
        if device_slab and not self._c.buffer.is_cuda:
            warnings.warn(f"WeightPublisher device_slab=True is ignored: the model is on the CPU, so there is no GPU "
                          f"for a device slab; /dev/shm/{self._c.slab} alone is published", stacklevel=2)
        if optimizer is not None:
            _fence_before_step(optimizer, self._fence)

    def _fence(self) -> None:
        if not self._c.closed:  # the optimizer may outlive the publisher
            self._c.wait_before_update()

    def publish(self, step: int = 0) -> Optional[int]:
        """Publishes the current weights as the next version and returns it, or None when every free slot
        was leased (the publish is skipped and counted; a later one supersedes it). On a GPU it returns
        once the snapshot is enqueued; readers see the version when the copy has landed.

        What is published is what the model holds at the call: a tensor rebound since (``p.data = t``) or
        replaced (``model.fc.weight = nn.Parameter(...)``) is taken back into the flat buffer (its values
        copied there; it views the buffer again); one converted to another dtype, shape or device
        (``model.double()``, ``model.to("cuda")``) is a ShapeError naming it. A slab removed from /dev/shm
        meanwhile is a SegmentNotFoundError."""
        return self._c.publish(_args.integer("WeightPublisher.publish step", step, 0, _args.U64))

    def flush(self) -> None:
        """Returns once no publish is in flight."""
        self._c.flush()

    def wait_before_update(self) -> None:
        """Returns once no publish copy still reads the weights: call before changing them (the optimizer
        given at construction calls it itself). A no-op on a GPU and without overlap."""
        self._c.wait_before_update()

    def publish_final(self, step: int, timeout_s: float = 60.0) -> int:
        """Publishes and commits ``step``'s weights, retrying while readers hold every slot."""
        step = _args.integer("WeightPublisher.publish_final step", step, 0, _args.U64)
        timeout = _args.seconds("WeightPublisher.publish_final timeout_s", timeout_s)
        return self._c.publish_final(step, 1e9 if timeout is None else timeout)

    @property
    def next_version(self) -> int:
        return self._c.next_version

    @property
    def slab(self) -> str:
        return self._c.slab

    @property
    def signature(self) -> int:
        """The model signature (docs/FORMAT.md): equal for models with equal names, dtypes and shapes."""
        return self._c.signature

    @property
    def buffer(self) -> torch.Tensor:
        """The flat uint8 buffer every parameter and buffer of the model now views."""
        return self._c.buffer

    def stats(self) -> dict:
        return self._c.stats()

    def take_timings(self) -> List[dict]:
        """Per committed publish: snapshot_ms, d2h_ms, visible_ms (publish called -> committed), ..."""
        return self._c.take_timings()

    def close(self) -> None:
        """Flushes, then removes the slab (unless it persists)."""
        self._c.close()

    def __enter__(self) -> "WeightPublisher":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _fence_before_step(optimizer: torch.optim.Optimizer, fence) -> None:
    """Runs ``fence()`` before every ``optimizer.step()``."""
    if hasattr(optimizer, "register_step_pre_hook"):  # torch >= 2.0
        optimizer.register_step_pre_hook(lambda *_: fence())
        return
    step = optimizer.step  # torch 1.x: the bound method, wrapped on this instance only

    def fenced_step(*args, **kwargs):
        fence()
        return step(*args, **kwargs)

    optimizer.step = fenced_step


class TensorInfo(NamedTuple):
    name: str
    dtype: str             # numpy's name, as the slab records it ("float32", "bfloat16", ...)
    shape: Tuple[int, ...]
    offset: int            # within a slot
    nbytes: int


class Lease:
    """One leased version: its bytes stay exactly that version until the lease is released (at the end
    of its with-block). ``tensors`` are zero-copy views of the slot through a copy-on-write mapping made
    for this lease: an in-place write changes this process's copy of the touched pages, seen by this
    lease's views only, never the slab other readers see. Copy what you keep past the release: views
    used after it may see a later version."""

    def __init__(self, c: "_tandem.Lease"):
        self._c = c
        self._tensors: Optional[Dict[str, torch.Tensor]] = None

    @property
    def version(self) -> int:
        return self._c.version

    @property
    def step(self) -> int:
        return self._c.step

    @property
    def publish_ns(self) -> int:
        """CLOCK_MONOTONIC at commit (time.monotonic_ns() reads the same clock)."""
        return self._c.publish_ns

    @property
    def tensors(self) -> Dict[str, torch.Tensor]:
        if self._tensors is None:
            self._tensors = self._c.tensors()
        return self._tensors

    def __getitem__(self, name: str) -> torch.Tensor:
        return self.tensors[name]

    @property
    def flat(self) -> torch.Tensor:
        """The whole slot image as uint8 (docs/FORMAT.md: the tensors at their table offsets)."""
        return self._c.flat()

    def still_valid(self) -> bool:
        return self._c.still_valid()

    def release(self) -> None:
        self._tensors = None
        self._c.release()

    def __enter__(self) -> "Lease":
        return self

    def __exit__(self, *exc) -> None:
        self.release()


class WeightFollower:
    """Follows a job's weight slab: the newest complete version, never torn (the C++ reader's seqlock and
    leases). ``load_into(model)`` copies it into a module (the C++ actors' Follower); ``lease()`` gives
    zero-copy views. ``leases`` is how many versions this follower may hold leased at once."""

    def __init__(self, job: Optional[str] = None, *, slab: Optional[str] = None, leases: int = 2):
        self._slab = _args.text("WeightFollower slab", slab) if slab is not None else slab_name(job)
        self._c = _tandem.WeightFollower(self._slab, _args.limited("WeightFollower leases", leases, "slab_leases"))
        self._bound: Dict[int, Tuple[Model, "_tandem.BoundModel"]] = {}

    @property
    def slab(self) -> str:
        return self._slab

    @property
    def latest_version(self) -> int:
        """The newest committed version (0: none yet); one atomic load."""
        return self._c.latest_version

    def info(self) -> dict:
        """Model name and signature, publish dtype, slots and the writer's counters."""
        return self._c.info()

    @property
    def tensors(self) -> List[TensorInfo]:
        return [TensorInfo(*t) for t in self._c.tensors()]

    def wait(self, newer_than: int = 0, timeout: Optional[float] = None) -> int:
        """Blocks (without the GIL) until a version newer than ``newer_than`` is committed; returns it.
        TimeoutError after ``timeout`` seconds."""
        return self._c.wait(_args.integer("WeightFollower.wait newer_than", newer_than, 0, _args.U64),
                            _args.seconds("WeightFollower.wait timeout", timeout))

    def lease(self, newer_than: int = 0, timeout: Optional[float] = None) -> Lease:
        """Leases the newest version (waiting for one newer than ``newer_than``); use it in a with-block."""
        return Lease(self._c.lease(_args.integer("WeightFollower.lease newer_than", newer_than, 0, _args.U64),
                                   _args.seconds("WeightFollower.lease timeout", timeout)))

    def load_into(self, model: Model, *, mode: str = "copy", model_name: str = "model") -> Optional[int]:
        """Loads the newest version into ``model`` if it is newer than what the model holds; returns that
        version, else None.

        The first call binds the model: its tensors are flattened in place, and its signature must be the
        slab's (a ShapeError names both). ``mode="zero_copy"`` (CPU, float32 slab) points the model's
        tensors into the leased slot (mapped copy-on-write: an in-place write stays in this process)
        instead of copying. A tensor of the model rebound or replaced since is pointed back at the loaded
        weights; one converted to another dtype, shape or device is a ShapeError naming it.
        """
        entry = self._bound.get(id(model))
        if entry is None or entry[0] is not model:
            named = _args.named_tensors("WeightFollower.load_into model", model)
            entry = (model, _tandem.BoundModel(named, _args.owners(model), self._slab, _args.text("mode", mode),
                                               _args.text("model_name", model_name)))
            self._bound[id(model)] = entry
        return entry[1].update()

    def version_of(self, model: Model) -> int:
        """The version ``model`` holds (0 before its first load)."""
        entry = self._bound.get(id(model))
        return entry[1].version if entry is not None and entry[0] is model else 0

    def close(self) -> None:
        self._bound.clear()
        self._c.close()

    def __enter__(self) -> "WeightFollower":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
