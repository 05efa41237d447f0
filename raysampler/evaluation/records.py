"""Records of sums over rows that travel from the shards and merge exactly: `Moments` of per-row values, and
`RowRef`, a row named by its place (never its values)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Moments:
    """Count, sum and centred sum of squares of some per-row values: merged exactly (Chan et al.), so the pooled
    variance comes out without any row travelling."""

    n: int = 0
    total: float = 0.0
    m2: float = 0.0

    @classmethod
    def of(cls, values: np.ndarray) -> Moments:
        v = np.asarray(values, dtype=np.float64).ravel()
        if v.size == 0:
            return cls()
        return cls(int(v.size), float(v.sum()), float(np.sum((v - v.mean()) ** 2)))

    def __add__(self, other: Moments) -> Moments:
        if self.n == 0:
            return other
        if other.n == 0:
            return self
        n = self.n + other.n
        delta = other.total / other.n - self.total / self.n
        return Moments(n, self.total + other.total, self.m2 + other.m2 + delta * delta * self.n * other.n / n)

    @property
    def se(self) -> float:
        """√(n · var): the standard error of the sum, as arviz-stats' loo reports it."""
        return math.sqrt(max(self.m2, 0.0))


@dataclass(frozen=True)
class RowRef:
    """One row of one shard: its position in the shard (never its values), and its row of the original data when
    the shard records it (`Shard.index`)."""

    shard: int
    row: int
    index: int | None = None
