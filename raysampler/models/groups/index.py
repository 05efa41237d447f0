"""A shard's rows by group: per grouping factor, each row's dense group index and effect values, as sparse gathers and
segment sums (one pass over the rows whatever the number of groups), built once per shard."""

from __future__ import annotations

import functools
import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np

from .scales import Scale


@dataclass(frozen=True, eq=False)
class Factor:
    """One grouping factor on one shard: each row's group index `code` (n,), its effect values Z (n, q), the number
    of groups G and its first local coordinate `start`; as sparse matrices over the rows: the gather A (n, G·q) (row j
    holds z_j in its group's columns: the group part of the linear predictor is A r), its transpose At (G·q, n)
    (segment sums per group and effect), S (G, n) (per group) and, built on first use from Z and the shard's p
    coefficient columns Xc, ZZ (G·q·q, n) (z_j z_jᵀ per group) and ZX (G·q·p, n) (z_j x_jᵀ per group): each weighted
    segment sum is one sparse product with the (n, K) row weights, no (n, K, ·) product of them first. ZX holds q·p
    values a row (12 bytes each with its index), as the old (n, K, p) products did K·p a pass."""

    code: np.ndarray
    Z: np.ndarray
    G: int
    q: int
    start: int
    A: Any
    At: Any
    S: Any
    Xc: np.ndarray
    #: the column of x = (θ, η) where the factor's η starts: d + `start` for a local factor; for a spanning
    #: (global) factor its place in θ, its G the factor's levels over all shards (`start` then unused, −1)
    col: int = -1
    local: bool = True

    @functools.cached_property
    def ZZ(self) -> Any:
        n, q = self.Z.shape
        return segment_matrix(self.code, (self.Z[:, :, None] * self.Z[:, None, :]).reshape(n, q * q), self.G)

    @functools.cached_property
    def ZX(self) -> Any:
        n, q = self.Z.shape
        return segment_matrix(
            self.code, (self.Z[:, :, None] * self.Xc[:, None, :]).reshape(n, q * self.Xc.shape[1]), self.G
        )

    @property
    def width(self) -> int:
        return self.G * self.q

    def gather(self, r: np.ndarray) -> np.ndarray:
        """Σ_k z_jk r_{g(j),k} per row and chain for r (K, G, q): (n, K)."""
        return self.A @ r.reshape(r.shape[0], -1).T

    def scatter(self, w: np.ndarray) -> np.ndarray:
        """Σ_{j in g} w_j z_j per group and chain for row values w (n, K): (K, G, q)."""
        K = w.shape[1]
        return (self.At @ w).reshape(self.G, self.q, K).transpose(2, 0, 1)

    def scatter_many(self, w: np.ndarray) -> np.ndarray:
        """As `scatter` for row values w (n, K, c): (K, G, q, c)."""
        n, K, c = w.shape
        return (self.At @ w.reshape(n, K * c)).reshape(self.G, self.q, K, c).transpose(2, 0, 1, 3)

    def scatter_x(self, w: np.ndarray) -> np.ndarray:
        """Σ_{j in g} w_j z_j x_jᵀ per group and chain for row weights w (n, K): (K, G, q, p)."""
        K = w.shape[1]
        return (self.ZX @ w).reshape(self.G, self.q, self.Xc.shape[1], K).transpose(3, 0, 1, 2)

    def blocks(self, w: np.ndarray) -> np.ndarray:
        """Σ_{j in g} w_j z_j z_jᵀ per group and chain for row weights w (n, K): (K, G, q, q)."""
        K = w.shape[1]
        return (self.ZZ @ w).reshape(self.G, self.q, self.q, K).transpose(3, 0, 1, 2)

    def per_group(self, w: np.ndarray) -> np.ndarray:
        """Σ_{j in g} w_j per group and chain for row values w (n, K): (K, G)."""
        return (self.S @ w).T


@dataclass(frozen=True, eq=False)
class ShardIndex:
    """What every pass over a shard reads, built once per shard (`HierarchicalGLM._index`): the family's design Xf
    (coefficient columns and per-row input, as the family reads them), its coefficient columns Xc and offset (n,)
    (or None) apart and contiguous, and each factor's `Factor`."""

    Xf: np.ndarray
    Xc: np.ndarray
    offset: np.ndarray | None
    factors: tuple[Factor, ...]

    @functools.cached_property
    def XcT(self) -> np.ndarray:
        """Xcᵀ (p, n), contiguous: its rows' elementwise products run along the rows (the curvature's θ block)."""
        return np.ascontiguousarray(self.Xc.T)

    def linear(self, beta: np.ndarray) -> np.ndarray:
        """X_c βᵀ (+ the offset) (n, K): the rows' linear predictors without their groups' parts."""
        lin = self.Xc @ beta.T
        if self.offset is not None:
            lin += self.offset[:, None]
        return lin

    @property
    def local(self) -> int:
        return sum(f.width for f in self.factors if f.local)


def segment_matrix(code: np.ndarray, values: np.ndarray, G: int) -> Any:
    """The sparse (G·c, n) matrix whose row g·c + i holds values[j, i] at column j for the rows j of group g: a
    product with (n, K) row weights sums values[:, i]·w per group (values (n, c)). Built column by column (row j's c
    entries), so nothing larger than the matrix itself is made on the way."""
    import scipy.sparse as sp

    n, c = values.shape
    rows = (code[:, None] * c + np.arange(c)[None, :]).reshape(-1)
    return sp.csc_matrix((values.reshape(-1), rows, np.arange(0, n * c + 1, c)), shape=(G * c, n)).tocsr()


def factor_index(
    code: np.ndarray, Z: np.ndarray, G: int, start: int, Xc: np.ndarray, col: int = -1, local: bool = True
) -> Factor:
    At = segment_matrix(code, Z, G)
    S = segment_matrix(code, np.ones((Z.shape[0], 1)), G)
    return Factor(code, np.ascontiguousarray(Z), G, Z.shape[1], start, At.T.tocsr(), At, S, Xc, col, local)


class IndexCache(dict):
    """Shard indices by id of the X they were built from, each dropped when its X is collected (so an id reused
    by a new array never finds an old index); pickled empty (it travels with the model to workers)."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (IndexCache, ())

    def find(self, X: np.ndarray) -> ShardIndex | None:
        hit = self.get(id(X))
        return hit[1] if hit is not None and hit[0] == (X.shape, X.ctypes.data) else None

    def keep(self, X: np.ndarray, index: ShardIndex) -> None:
        key = id(X)
        self[key] = ((X.shape, X.ctypes.data), index)
        weakref.finalize(X, self.pop, key, None)


@dataclass(frozen=True, eq=False)
class Point:
    """One pass over a shard at K points x: the family's per-row terms at the rows' linear predictors, and per
    factor its scales, η (K, G, q) and r = M η."""

    index: ShardIndex
    x: np.ndarray
    terms: Any  # common.RowTerms
    scales: tuple[Scale, ...]
    etas: tuple[np.ndarray, ...]
    rs: tuple[np.ndarray, ...]
