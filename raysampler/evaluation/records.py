"""Records of sums over rows that travel from the shards and merge exactly: `Moments` of per-row values, `RowRef`, a
row named by its place (never its values), and a shard's PSIS-LOO record `LooPart` with its rows of high k̂
(`HighRow`)."""

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


@dataclass(frozen=True)
class HighRow:
    """A row whose PSIS k̂ was ≥ 0.7: where it is and its own elpd_i, p_loo_i and k̂ (numbers, never the row), so that
    moment matching can replace them and the bands can be counted again."""

    ref: RowRef
    elpd: float
    p_loo: float
    k: float


@dataclass(frozen=True)
class LooPart:
    """One shard's PSIS-LOO sums: elpd moments and Σ p_loo over its rows below k̂ = 0.7 (flat rows included), the
    counts of its flat rows, of the others with k̂ < 0.7 and of those above good_k, their largest k̂, its rows
    with k̂ ≥ 0.7 one by one (`HighRow`) and those with good_k < k̂ < 0.7 (`warned`: arviz-stats warns of them too, so
    the warning can name its rows); pointwise elpd, k̂ and flatness only when asked for."""

    shard: int
    elpd: Moments
    p_loo: float
    k_flat: int
    k_ok: int
    k_above_good: int
    max_k: float
    high: tuple[HighRow, ...]
    elpd_i: np.ndarray | None = None
    pareto_k: np.ndarray | None = None
    flat_i: np.ndarray | None = None
    warned: tuple[HighRow, ...] = ()

    def __add__(self, o: LooPart) -> LooPart:
        """This shard's sums with those of its next range of rows."""

        def cat(a: np.ndarray | None, b: np.ndarray | None) -> np.ndarray | None:
            return None if a is None or b is None else np.concatenate([a, b])

        return LooPart(
            self.shard,
            self.elpd + o.elpd,
            self.p_loo + o.p_loo,
            self.k_flat + o.k_flat,
            self.k_ok + o.k_ok,
            self.k_above_good + o.k_above_good,
            float(np.nanmax([self.max_k, o.max_k])),
            self.high + o.high,
            cat(self.elpd_i, o.elpd_i),
            cat(self.pareto_k, o.pareto_k),
            cat(self.flat_i, o.flat_i),
            self.warned + o.warned,
        )
