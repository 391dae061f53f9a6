"""Checks of the arguments the wrappers pass on, before anything is made.

The rule and its one-line message live in C++ (python/bindings/arguments.hpp: ``_tandem.check_integer``,
``_tandem.check_seconds``), which the bindings' own setters use too; the bounds are the components'
own (``_tandem.LIMITS``). A wrong argument is a :class:`tandem.Error` naming the option, its value and
the allowed range.
"""

from __future__ import annotations

import math
import os
from typing import List, Optional, Tuple

import torch

from . import _tandem
from .errors import Error

U32 = 2**32 - 1
U64 = 2**64 - 1
I64 = 2**63 - 1
LIMITS = _tandem.LIMITS


def integer(what: str, value, lo: int, hi: int) -> int:
    return _tandem.check_integer(what, value, lo, hi)


def limited(what: str, value, limit: str) -> int:
    """``value`` within the C++ component's bounds named ``limit`` (see ``_tandem.LIMITS``)."""
    lo, hi = LIMITS[limit]
    return _tandem.check_integer(what, value, lo, hi)


def seconds(what: str, value) -> Optional[float]:
    return _tandem.check_seconds(what, value)


def text(what: str, value) -> str:
    if not isinstance(value, str):
        raise Error(f"{what}={shown(value)} is not a string: pass a str")
    return value


def path(what: str, value) -> str:
    try:
        p = os.fspath(value)
    except TypeError:
        raise Error(f"{what}={shown(value)} is not a path: pass a str or a pathlib.Path") from None
    return p if isinstance(p, str) else os.fsdecode(p)


def floats(what: str, value) -> List[float]:
    """One float or one per channel: a number, a numpy or 0-d torch scalar (what ``x.mean()`` returns), a
    sequence, a 1-d array or tensor. Finite values only."""
    if isinstance(value, (str, bytes)):
        items = None
    elif isinstance(value, torch.Tensor):
        items = value.detach().cpu().reshape(-1).tolist()
    else:
        try:
            items = list(value)
        except TypeError:  # a number, a numpy scalar or a 0-d array
            items = [value]
    try:
        out = [float(v) for v in items] if items is not None else None
    except (TypeError, ValueError):
        out = None
    if not out or not all(math.isfinite(v) for v in out):
        raise Error(f"{what}={shown(value)} is not a finite number or a sequence of them: pass a float, or one per "
                    f"channel")
    return out


def named_tensors(what: str, model) -> List[Tuple[str, torch.Tensor]]:
    """A module's parameters then buffers, a dict of tensors, or (name, tensor) pairs, checked."""
    if isinstance(model, torch.nn.Module):
        pairs = list(model.named_parameters()) + list(model.named_buffers())
    elif isinstance(model, dict):
        pairs = list(model.items())
    else:
        try:
            pairs = [tuple(p) for p in model]
        except TypeError:
            raise Error(f"{what}={shown(model)} is not a model: pass a torch.nn.Module, a dict of tensors or "
                        f"(name, tensor) pairs") from None
    for p in pairs:
        if len(p) != 2 or not isinstance(p[0], str) or not isinstance(p[1], torch.Tensor):
            raise Error(f"{what}: {shown(p)} is not a (name, tensor) pair: every entry is a str name and a "
                        f"torch.Tensor")
    return pairs


def owners(model) -> dict:
    """Tensor name -> (dict, key) where the model holds it, so that a tensor replaced by another object is
    seen (python/bindings/model_owners.hpp)."""
    out = {}
    if isinstance(model, torch.nn.Module):
        for prefix, module in model.named_modules():
            for table in (module._parameters, module._buffers):
                for key in table:
                    out.setdefault(f"{prefix}.{key}" if prefix else key, (table, key))
    elif isinstance(model, dict):
        out = {key: (model, key) for key in model}
    return out


def shown(value) -> str:
    """``value`` as a message shows it: its repr on one line, cut after 60 characters."""
    text = repr(value).replace("\n", " ")
    return text if len(text) <= 60 else text[:57] + "..."
