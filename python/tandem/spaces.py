"""Box and Discrete: the spaces of tandem.envs, readable by Gymnasium-style code without gymnasium.

They carry what such code reads (``shape``, ``dtype``, ``low``, ``high``, ``n``, ``sample()``,
``contains()``, ``seed()``) with Gymnasium's meanings; ``to_gymnasium()`` converts one where gymnasium
is installed.
"""

from __future__ import annotations

from typing import Optional, Sequence, Tuple

import numpy as np


class Box:
    """Values of ``shape`` and ``dtype`` in ``[low, high]`` (elementwise; infinite bounds allowed)."""

    def __init__(self, low, high, shape: Sequence[int], dtype=np.float32, seed: Optional[int] = None):
        self.shape: Tuple[int, ...] = tuple(int(d) for d in shape)
        self.dtype = np.dtype(dtype)
        self.low = np.full(self.shape, low, dtype=self.dtype) if np.isscalar(low) else np.asarray(low, self.dtype)
        self.high = np.full(self.shape, high, dtype=self.dtype) if np.isscalar(high) else np.asarray(high, self.dtype)
        self.np_random = np.random.default_rng(seed)

    def seed(self, seed: Optional[int] = None) -> None:
        self.np_random = np.random.default_rng(seed)

    def is_bounded(self, manner: str = "both") -> bool:
        below, above = bool(np.all(np.isfinite(self.low))), bool(np.all(np.isfinite(self.high)))
        return {"both": below and above, "below": below, "above": above}[manner]

    def sample(self) -> np.ndarray:
        """Uniform where bounded, normal where unbounded (Gymnasium's rule, both sides infinite here)."""
        if np.issubdtype(self.dtype, np.integer):
            return self.np_random.integers(self.low, self.high, size=self.shape, endpoint=True).astype(self.dtype)
        bounded = np.isfinite(self.low) & np.isfinite(self.high)
        out = self.np_random.normal(size=self.shape)
        uniform = self.np_random.uniform(np.where(bounded, self.low, 0), np.where(bounded, self.high, 1), self.shape)
        return np.where(bounded, uniform, out).astype(self.dtype)

    def contains(self, x) -> bool:
        x = np.asarray(x)
        return x.shape == self.shape and bool(np.all(x >= self.low)) and bool(np.all(x <= self.high))

    __contains__ = contains

    def to_gymnasium(self):
        import gymnasium
        return gymnasium.spaces.Box(self.low, self.high, self.shape, self.dtype)

    def __eq__(self, other) -> bool:
        return (isinstance(other, Box) and self.shape == other.shape and self.dtype == other.dtype
                and np.array_equal(self.low, other.low) and np.array_equal(self.high, other.high))

    def __repr__(self) -> str:
        low = self.low.flat[0] if self.low.size and np.all(self.low == self.low.flat[0]) else self.low
        high = self.high.flat[0] if self.high.size and np.all(self.high == self.high.flat[0]) else self.high
        return f"Box({low}, {high}, {self.shape}, {self.dtype})"


class Discrete:
    """The integers ``0 .. n - 1``."""

    def __init__(self, n: int, seed: Optional[int] = None):
        self.n = int(n)
        self.start = 0
        self.shape: Tuple[int, ...] = ()
        self.dtype = np.dtype(np.int64)
        self.np_random = np.random.default_rng(seed)

    def seed(self, seed: Optional[int] = None) -> None:
        self.np_random = np.random.default_rng(seed)

    def sample(self) -> np.int64:
        return np.int64(self.np_random.integers(self.n))

    def contains(self, x) -> bool:
        try:
            return 0 <= int(x) < self.n and int(x) == x
        except (TypeError, ValueError):
            return False

    __contains__ = contains

    def to_gymnasium(self):
        import gymnasium
        return gymnasium.spaces.Discrete(self.n)

    def __eq__(self, other) -> bool:
        return isinstance(other, Discrete) and self.n == other.n

    def __repr__(self) -> str:
        return f"Discrete({self.n})"
