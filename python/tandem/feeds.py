"""HostFeed and DeviceFeed: the learner's feeds over a dataset cache, as Python iterables.

A feed is one stream of steps over epochs ``epoch, epoch + 1, ...``. ``for x, y in feed`` yields the
steps left in the current epoch (all ``len(feed)`` of them when it starts at a boundary), so the
loop of a DataLoader reads the same::

    for epoch in range(epochs):
        for x, y in feed:
            ...

Sharding is ``DistributedSampler(drop_last=True)``'s: ``rank`` and ``world_size`` default to
torchrun's RANK / WORLD_SIZE (or Slurm's), read exactly as tandem-learner reads them. The same seed,
rank and epoch give byte-identical batches to the C++ feed's, because they are the C++ feed's.
"""

from __future__ import annotations

from typing import Iterator, List, NamedTuple, Optional, Sequence, Tuple, Union

import torch

from . import _args, _tandem
from .data import Dataset
from .errors import Error

__all__ = ["HostFeed", "DeviceFeed", "Step"]

Batch = Tuple[torch.Tensor, torch.Tensor]


class Step(NamedTuple):
    epoch: int
    index: int                 # step within the epoch
    batches: List[Batch]       # one (x, y) per consumer, each in its own allocation


def _options(feed: str, split: str, batch_size: int, consumers: int, rank: Optional[int], world_size: Optional[int],
             seed: int, drop_last: bool, mean: Union[float, Sequence[float]], std: Union[float, Sequence[float]],
             device_index: int) -> "_tandem.FeedOptions":
    o = _tandem.FeedOptions()
    o.split = _args.text(f"{feed} split", split)
    o.batch_size = _args.integer(f"{feed} batch_size", batch_size, 1, _args.I64)
    o.consumers = _args.integer(f"{feed} consumers", consumers, 1, _args.U32)
    if rank is None or world_size is None:
        env = _tandem.rank_from_env()
        rank = env["rank"] if rank is None else rank
        world_size = env["world_size"] if world_size is None else world_size
    o.world_size = _args.integer(f"{feed} world_size", world_size, 1, _args.U32)
    o.rank = _args.integer(f"{feed} rank", rank, 0, o.world_size - 1)
    o.seed = _args.integer(f"{feed} seed", seed, 0, _args.U64)
    o.drop_last = bool(drop_last)
    o.mean = _args.floats(f"{feed} mean", mean)
    o.std = _args.floats(f"{feed} std", std)
    o.device_index = _args.integer(f"{feed} device index", device_index, 0, _args.U32)
    return o


def _dataset(feed: str, dataset: Union[Dataset, str]) -> Dataset:
    if isinstance(dataset, Dataset):
        return dataset
    return Dataset(_args.text(f"{feed} dataset", dataset))


class _Feed:
    _c: "_tandem.HostFeed | _tandem.DeviceFeed"
    _length: int  # steps per epoch, set by each feed once its _c exists

    def __init__(self, consumers: int):
        self._consumers = consumers

    def __len__(self) -> int:
        """Steps per epoch."""
        return self._length

    @property
    def epoch(self) -> int:
        """The epoch the next step belongs to."""
        return self._c.next_epoch

    def next_step(self) -> Step:
        """The next step of the stream (blocks, without the GIL, until it is ready)."""
        return Step._make(self._c.next())

    def __iter__(self) -> Iterator[Union[Batch, List[Batch]]]:
        """The steps left in the current epoch: ``(x, y)`` for one consumer, else a list of them.
        The iterator is C++'s: each step of the loop is one call into C++, as next_step() is."""
        return self._c.epoch(self._consumers == 1)


class HostFeed(_Feed):
    """Batches gathered by C++ worker threads straight from the cache (learner/feed/host_feed.hpp).

    ``x`` is float32 ``(batch, *sample_shape)``, normalised as ``(x / 255 - mean) / std`` from a uint8
    cache or ``(x - mean) / std`` from a float32 one; ``y`` is the cache's int64 labels or float32
    targets ``(batch, *target_shape)``. On the CPU both are views of a staging slot that is reused once
    every tensor of its step is gone:
    keep at most ``ring_slots - 1`` steps alive (``.clone()`` what you keep; holding more raises
    instead of waiting for ever). On a GPU (``device="cuda"``, or ``"auto"`` with one visible) the ring
    is pinned and event-fenced: a slot is refilled only after its copy to the GPU completed, and each
    batch is a fresh GPU tensor, converted on the current stream.
    """

    def __init__(self, dataset: Union[Dataset, str], batch_size: int = 256, *, split: str = "train",
                 consumers: int = 1, rank: Optional[int] = None, world_size: Optional[int] = None, seed: int = 0,
                 epoch: int = 0, drop_last: bool = False, mean: Union[float, Sequence[float]] = 0.0,
                 std: Union[float, Sequence[float]] = 1.0, device: Union[str, torch.device] = "auto",
                 workers: int = 0, ring_slots: int = 4):
        super().__init__(consumers)
        placement, index = _placement("HostFeed", device)
        o = _options("HostFeed", split, batch_size, consumers, rank, world_size, seed, drop_last, mean, std, index)
        o.placement = placement
        o.workers = _args.limited("HostFeed workers", workers, "feed_workers")
        o.ring_slots = _args.limited("HostFeed ring_slots", ring_slots, "feed_ring_slots")
        epoch = _args.integer("HostFeed epoch", epoch, 0, _args.U64)
        self.dataset = _dataset("HostFeed", dataset)
        self._c = _tandem.HostFeed(self.dataset._c, o, epoch)
        self._length = self._c.length  # read once: next_step() is on the training loop's path

    @property
    def on_gpu(self) -> bool:
        return self._c.on_gpu


class DeviceFeed(_Feed):
    """Batches gathered on the GPU from a copy of the split kept in GPU memory (one per process and
    GPU; learner/feed/device_feed.hpp). Same epochs and order as HostFeed; each consumer's batch is its
    own allocation, made by kernels on the current CUDA stream without a host sync. A batch nothing
    refers to any more (no name, view, weak reference, attribute, autograd graph or gradient) is
    refilled in place and handed back as the same tensor objects (python/bindings/batch_reuse.hpp);
    one still held is never written again. Needs a GPU and a torch with CUDA, else a tandem.Error
    says so."""

    def __init__(self, dataset: Union[Dataset, str], batch_size: int = 256, *, split: str = "train",
                 consumers: int = 1, rank: Optional[int] = None, world_size: Optional[int] = None, seed: int = 0,
                 epoch: int = 0, drop_last: bool = False, mean: Union[float, Sequence[float]] = 0.0,
                 std: Union[float, Sequence[float]] = 1.0, device: Union[int, str, torch.device] = "cuda"):
        super().__init__(consumers)
        _, index = _placement("DeviceFeed", device)
        o = _options("DeviceFeed", split, batch_size, consumers, rank, world_size, seed, drop_last, mean, std, index)
        epoch = _args.integer("DeviceFeed epoch", epoch, 0, _args.U64)
        self.dataset = _dataset("DeviceFeed", dataset)
        self._c = _tandem.DeviceFeed(self.dataset._c, o, epoch)
        self._length = self._c.length  # read once: next_step() is on the training loop's path


def _placement(feed: str, device: Union[int, str, torch.device]) -> Tuple[str, int]:
    if isinstance(device, int) and not isinstance(device, bool):
        return "cuda", _args.integer(f"{feed} device", device, 0, _args.U32)
    if isinstance(device, str) and device == "auto":
        return "auto", 0
    try:
        d = torch.device(device)
    except (RuntimeError, TypeError):
        raise Error(f"{feed} device={device!r} is not a device: use 'auto', 'cpu', 'cuda', 'cuda:N' or a GPU index") \
            from None
    if d.type not in ("cpu", "cuda"):
        raise Error(f"{feed} device={device!r} is not a device it feeds: use 'auto', 'cpu', 'cuda' or 'cuda:N'")
    return d.type, d.index or 0
