"""The three batch sources of ddp_pde.py, one interface: a context manager whose epoch() yields the
next epoch's (x, regime) batches of this rank on its device, x float (batch, 2, points) normalised as
(x / 255 - mean) / std and regime int64 (batch,), plus tree_memory() for the memory figures.

Every source shards and shuffles as DistributedSampler(shuffle=True, drop_last=True) does: the epoch's
permutation is seeded by seed + epoch, rank r takes every world-th index from r, and the last short
batch is dropped, so the variants differ in where the bytes come from, not in what they train on.
"""
import os
import pathlib

import numpy as np
import torch


class BadInput(Exception):
    """A missing or malformed dataset: the message is one line naming it and the fix."""


def check_npy_dir(d: pathlib.Path):
    """The .npy pair make_pde_dataset.py writes, checked before any rank loads it."""
    make = f"write it with `/usr/bin/python3 examples/python/make_pde_dataset.py {d}`"
    for name in ("x_train.npy", "y_train.npy"):
        if not (d / name).is_file():
            raise BadInput(f"{d / name} does not exist: {make}")
    x = np.load(d / "x_train.npy", mmap_mode="r")
    y = np.load(d / "y_train.npy", mmap_mode="r")
    if x.dtype != np.uint8 or x.ndim != 3 or x.shape[1] != 2:
        raise BadInput(f"{d / 'x_train.npy'} is {x.dtype} {x.shape}, not uint8 (N, 2, points): {make}")
    if y.dtype != np.int64 or y.shape != (x.shape[0],):
        raise BadInput(f"{d / 'y_train.npy'} is {y.dtype} {y.shape}, not int64 ({x.shape[0]},): {make}")


def shard_order(n, rank, world, seed, epoch):
    """DistributedSampler(shuffle=True, drop_last=True)'s indices of one rank for one epoch."""
    g = torch.Generator()
    g.manual_seed(seed + epoch)
    usable = n - n % world
    return torch.randperm(n, generator=g)[:usable][rank::world]


class TandemBatches:
    """tandem.HostFeed over the node's dataset cache (C++ gather threads reading the one mapped copy), or
    on a GPU tandem.DeviceFeed (the rank's split copied from the cache into GPU memory once, batches
    gathered and normalised there by kernels on the current stream)."""

    def __init__(self, cache, batch, rank, world, seed, mean, std, workers, device):
        import tandem
        shard = dict(split="train", rank=rank, world_size=world, seed=seed, mean=mean, std=std, drop_last=True)
        try:
            if device.type == "cuda":
                self.feed = tandem.DeviceFeed(cache, batch, device=device, **shard)
            else:
                self.feed = tandem.HostFeed(cache, batch, device="cpu", workers=workers, **shard)
        except tandem.SegmentNotFoundError as e:
            raise BadInput(f"{e} (ddp_pde.py --cache {cache})") from None
        shape = tuple(self.feed.dataset["x"].shape)
        if len(shape) != 3 or shape[1] != 2:
            raise BadInput(f"dataset cache '{cache}' holds x of shape {shape}, not (N, 2, points): preload a "
                           f"make_pde_dataset.py directory (tandem data preload {cache} --from DIR --force)")
        self.shared_bytes = os.stat(f"/dev/shm/{self.feed.dataset.segment}").st_size

    def describe(self):
        return f"tandem.{type(self.feed).__name__} over /dev/shm/{self.feed.dataset.segment}"

    @property
    def epoch_index(self):
        return self.feed.epoch

    def epoch(self):
        # The batches are views of the feed's staging ring: used before the next one is asked for.
        yield from self.feed

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.feed.dataset.close()


class MemoryBatches:
    """The upper bound: the arrays in this process's own memory (on a GPU, in its memory), shuffled
    batches sliced from them."""

    shared_bytes = 0

    def __init__(self, d, batch, rank, world, seed, mean, std, device):
        self.x = torch.from_numpy(np.load(d / "x_train.npy")).to(device)
        self.y = torch.from_numpy(np.load(d / "y_train.npy")).to(device)
        self.d, self.batch, self.rank, self.world, self.seed = d, batch, rank, world, seed
        self.scale, self.bias = 1.0 / (255.0 * std), -mean / std
        self.epoch_index = 0

    def describe(self):
        return f"{self.d} loaded into this rank's memory ({self.x.device})"

    def epoch(self):
        order = shard_order(len(self.x), self.rank, self.world, self.seed, self.epoch_index).to(self.x.device)
        self.epoch_index += 1
        for i in range(len(order) // self.batch):
            idx = order[i * self.batch:(i + 1) * self.batch]
            yield self.x.index_select(0, idx).float().mul_(self.scale).add_(self.bias), self.y.index_select(0, idx)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass


class NpyPairs(torch.utils.data.Dataset):
    """The Dataset a user writes: the files opened lazily in each worker (so they are not pickled to
    it), memory-mapped or read whole, one sample converted per __getitem__."""

    def __init__(self, d, load, mean, std):
        self.d, self.mmap = d, "r" if load == "mmap" else None
        self.n = np.load(d / "y_train.npy", mmap_mode="r").shape[0]
        self.scale, self.bias = 1.0 / (255.0 * std), -mean / std
        self.x = self.y = None

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if self.x is None:
            self.x = np.load(self.d / "x_train.npy", mmap_mode=self.mmap)
            self.y = np.load(self.d / "y_train.npy", mmap_mode=self.mmap)
        x = torch.from_numpy(np.asarray(self.x[i], dtype=np.float32))
        return x.mul_(self.scale).add_(self.bias), int(self.y[i])


class LoaderBatches:
    """Dataset + DistributedSampler + DataLoader(num_workers), the baseline; for a GPU with pinned
    batches copied without blocking, as the PyTorch tutorials do."""

    shared_bytes = 0

    def __init__(self, d, batch, rank, world, seed, mean, std, workers, load, device):
        self.dataset = NpyPairs(d, load, mean, std)
        self.sampler = torch.utils.data.DistributedSampler(self.dataset, num_replicas=world, rank=rank, shuffle=True,
                                                           seed=seed, drop_last=True)
        self.loader = torch.utils.data.DataLoader(self.dataset, batch_size=batch, sampler=self.sampler,
                                                  num_workers=workers, persistent_workers=workers > 0,
                                                  drop_last=True, pin_memory=device.type == "cuda")
        self.what = f"DataLoader({workers} workers) over {d}, {load}"
        self.device = device
        self.epoch_index = 0

    def describe(self):
        return self.what

    def epoch(self):
        self.sampler.set_epoch(self.epoch_index)
        self.epoch_index += 1
        if self.device.type == "cpu":
            yield from self.loader
            return
        for x, y in self.loader:
            yield x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        del self.loader  # stops the persistent workers now, not at interpreter exit


MEMORY_FIELDS = ("processes", "pss", "pss_anon", "pss_file", "pss_shmem")
FIELDS = {"Pss:": "pss", "Pss_Anon:": "pss_anon", "Pss_File:": "pss_file", "Pss_Shmem:": "pss_shmem"}


def descendants(pid):
    out = []
    for task in pathlib.Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            out += [int(child)] + descendants(int(child))
    return out


def tree_memory(pid):
    """PSS of a process and all its descendants (a rank and its DataLoader workers), in bytes, from
    /proc/<pid>/smaps_rollup: shared pages are divided among the processes that map them, so sums over
    processes count each page once."""
    total = dict.fromkeys(MEMORY_FIELDS, 0)
    for p in [pid] + descendants(pid):
        try:
            lines = pathlib.Path(f"/proc/{p}/smaps_rollup").read_text().splitlines()
        except (FileNotFoundError, ProcessLookupError):
            continue  # exited meanwhile
        total["processes"] += 1
        for line in lines:
            key, *rest = line.split()
            if key in FIELDS:
                total[FIELDS[key]] += int(rest[0]) * 1024
    return total


def tree_cpu_seconds(pid):
    """User + system CPU seconds of a process (all its threads) and its live descendants: the cost of a
    step whatever share of the cores the machine's other work leaves the job."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for p in [pid] + descendants(pid):
        try:
            fields = pathlib.Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        total += (int(fields[11]) + int(fields[12])) / ticks  # utime, stime: fields 14 and 15 of stat
    return total
