"""Tandem from Python: the dataset cache, the feeds, the weight slab, the experience rings, the job and
the envs (``tandem.envs``: Tandem's C++ environments with Gymnasium's vector API).

Every part is the C++ component the Tandem programs use (one implementation), reached through the
extension ``tandem._tandem``: tensors cross as ``torch.Tensor`` without copies, blocking calls release
the GIL, and errors are :class:`tandem.Error` subclasses carrying the C++ one-line message.
docs/PYTHON.md has an example per part and how each maps onto the segments of docs/FORMAT.md.
"""

import torch as _torch  # noqa: F401  first: the extension hands out torch.Tensor objects

from . import errors
from .errors import (CorruptSegmentError, DTypeError, Error, ForeignSegmentError, NoSpaceError, NotInJobError,
                     OwnerError, SegmentExistsError, SegmentNotFoundError, ShapeError, SystemCallError)
from .data import Dataset, preload, remove_dataset
from .feeds import DeviceFeed, HostFeed
from .weights import WeightFollower, WeightPublisher, slab_name
from .rings import ExperienceRings, ExperienceWriter
from .job import Job, in_job, job
from . import envs

__version__ = "0.1.0"

__all__ = [
    "Dataset", "preload", "remove_dataset",
    "HostFeed", "DeviceFeed",
    "WeightPublisher", "WeightFollower", "slab_name",
    "ExperienceRings", "ExperienceWriter",
    "job", "Job", "in_job",
    "envs",
    "errors", "Error", "SegmentNotFoundError", "ForeignSegmentError", "CorruptSegmentError", "OwnerError",
    "NoSpaceError", "SegmentExistsError", "DTypeError", "ShapeError", "NotInJobError", "SystemCallError",
]
