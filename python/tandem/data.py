"""The dataset cache: /dev/shm/tandem.data.<name>, preloaded once per node, attached zero-copy."""

from __future__ import annotations

import os
from typing import Dict, List, Optional, Union

import torch

from . import _args, _tandem
from .errors import Error

_MAX_THREADS = 1024  # loader and checksum threads: more is a typo, not a faster load

__all__ = ["Dataset", "preload", "remove_dataset"]


class Dataset:
    """A dataset cache attached from /dev/shm/tandem.data.<name> (docs/FORMAT.md, "Dataset cache").

    Each field is a ``torch.Tensor`` of shape ``(num_samples, *sample_shape)`` mapped straight from
    /dev/shm: no copy, and any number of processes attaching one cache share one copy in memory. The
    cache itself cannot be changed from here: the tensors view a copy-on-write mapping, so an in-place
    write changes a private copy of the touched pages in this process only.

    Use it as a context manager (or call :meth:`close`); tensors and feeds made from it keep the
    mapping alive after it is closed.
    """

    def __init__(self, name: str):
        self._c = _tandem.Dataset(_args.text("Dataset name", name))
        self._fields: Dict[str, torch.Tensor] = {}

    @property
    def name(self) -> str:
        return self._c.name

    @property
    def segment(self) -> str:
        """The /dev/shm object's name, e.g. ``tandem.data.fmnist``."""
        return self._c.segment

    @property
    def num_samples(self) -> int:
        return self._c.num_samples

    @property
    def source(self) -> str:
        return self._c.source

    @property
    def format(self) -> str:
        return self._c.format

    @property
    def checksum(self) -> int:
        """The payload checksum recorded at preload (XXH3-64, docs/FORMAT.md)."""
        return self._c.checksum

    @property
    def load_seconds(self) -> float:
        return self._c.load_seconds

    @property
    def nbytes(self) -> int:
        """Bytes of the whole segment."""
        return self._c.nbytes

    @property
    def field_names(self) -> List[str]:
        return self._c.field_names()

    def field_info(self, name: str) -> dict:
        """dtype (numpy's name), sample_shape, offset and bytes of one field, as the segment records them."""
        return self._c.field_info(name)

    def __getitem__(self, field: str) -> torch.Tensor:
        """Field ``field`` (``"x"``, ``"y"``) for every sample, zero-copy."""
        if field not in self._fields:
            self._fields[field] = self._c.field(field)
        return self._fields[field]

    @property
    def fields(self) -> Dict[str, torch.Tensor]:
        return {name: self[name] for name in self.field_names}

    @property
    def splits(self) -> Dict[str, range]:
        """Each split's samples, e.g. ``{"train": range(0, 60000), "test": range(60000, 70000)}``."""
        return {name: range(b, e) for name, (b, e) in self._c.splits().items()}

    def split(self, name: str) -> Dict[str, torch.Tensor]:
        """Every field narrowed to split ``name`` (still zero-copy)."""
        splits = self.splits
        if name not in splits:
            raise Error(f"dataset cache '{self.name}' has no split '{name}' (it has: {', '.join(splits)})")
        r = splits[name]
        return {f: t[r.start:r.stop] for f, t in self.fields.items()}

    def verify(self, threads: int = 0) -> int:
        """Recomputes the payload checksum (``tandem data verify``); CorruptSegmentError if it changed."""
        return self._c.verify(_args.integer("Dataset.verify threads", threads, 0, _MAX_THREADS))

    def close(self) -> None:
        self._fields.clear()
        self._c.close()

    @property
    def closed(self) -> bool:
        return self._c.closed

    def __enter__(self) -> "Dataset":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        if self.closed:
            return f"tandem.Dataset('{self.name}', closed)"
        return f"tandem.Dataset('{self.name}', {self.num_samples} samples, fields {self.field_names})"


def preload(name: str, from_path: Union[str, os.PathLike], *, format: Optional[str] = None, force: bool = False,
            threads: int = 0, progress: bool = True) -> Dataset:
    """Loads a dataset into /dev/shm/tandem.data.<name> as ``tandem data preload`` does (the same readers:
    IDX, gzip'd IDX, CIFAR-10 batches, .npy pairs) and returns it attached.

    The progress bar is drawn on stderr when it is a terminal. Ctrl-C stops the load and leaves nothing
    in /dev/shm; so does every error. ``force`` replaces an existing cache of that name.
    """
    _tandem.preload(_args.text("preload name", name), _args.path("preload from_path", from_path),
                    "" if format is None else _args.text("preload format", format), bool(force),
                    _args.integer("preload threads", threads, 0, _MAX_THREADS), bool(progress))
    return Dataset(name)


def remove_dataset(name: str) -> None:
    """Removes /dev/shm/tandem.data.<name> (``tandem data rm``); processes that mapped it keep their mapping."""
    _tandem.remove_dataset(_args.text("remove_dataset name", name))
