"""PSIS-LOO at the shards: each shard's rows are evaluated and Pareto-smoothed where they live, and only sums come
back (`LooPart`), merged into arviz-stats' own `ELPDData` (`SiteLoo`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from scipy.special import logsumexp

from ..enums import Executor
from ..models.contract import Model, natural_values
from ..shards import ShardSet
from .fits import (
    BLOCK_ROWS,
    DEFAULT_DRAWS,
    DrawsArg,
    Fit,
    executor_of,
    flat_draws,
    model_of,
    shards_of,
    thin_draws,
)
from .records import Moments, RowRef
from .shard_tasks import ShardRows, run_at_shards

if TYPE_CHECKING:
    import xarray as xr

#: The Pareto k above which PSIS-LOO's estimate for an observation is unreliable (its row comes back by index).
K_THRESHOLD = 0.7


@dataclass(frozen=True)
class LooPart:
    """One shard's PSIS-LOO sums: elpd moments, Σ p_loo, Pareto-k counts by band, the rows with k ≥ 0.7 and the
    largest k; pointwise elpd and k only when asked for."""

    shard: int
    elpd: Moments
    p_loo: float
    k_ok: int
    k_high: int
    k_above_good: int
    max_k: float
    high_k_rows: tuple[RowRef, ...]
    elpd_i: np.ndarray | None = None
    pareto_k: np.ndarray | None = None

    def __add__(self, o: LooPart) -> LooPart:
        """This shard's sums with those of its next range of rows."""

        def cat(a: np.ndarray | None, b: np.ndarray | None) -> np.ndarray | None:
            return None if a is None or b is None else np.concatenate([a, b])

        return LooPart(
            self.shard,
            self.elpd + o.elpd,
            self.p_loo + o.p_loo,
            self.k_ok + o.k_ok,
            self.k_high + o.k_high,
            self.k_above_good + o.k_above_good,
            float(np.nanmax([self.max_k, o.max_k])),
            self.high_k_rows + o.high_k_rows,
            cat(self.elpd_i, o.elpd_i),
            cat(self.pareto_k, o.pareto_k),
        )


def loo_rows(
    model: Model, rows: ShardRows, theta: np.ndarray, chains: int, r_eff: float, names: tuple[str, ...]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(elpd_i, pareto_k, p_loo_i) of every row, in blocks of rows: the Pareto-smoothed log weights and k of each
    observation are arviz-stats' own (`psislw`, as its `loo` computes them); elpd_i = log Σ_s w_s p(y_i | θ_s) and
    p_loo_i = lppd_i − elpd_i follow in one vectorised step (what its `loo` does per observation)."""
    from arviz_stats.base import array_stats

    out: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    S = theta.shape[0]
    for a in range(0, rows.X.shape[0], BLOCK_ROWS):
        Xb, yb = rows.X[a : a + BLOCK_ROWS], rows.y[a : a + BLOCK_ROWS]
        ll = model.log_likelihood(Xb, yb, model.evaluation_x(Xb, yb, theta, names, 0))
        lw, k = array_stats.psislw(ll.reshape(ll.shape[0], chains, -1), r_eff=r_eff, axis=(-2, -1))
        e = logsumexp(lw.reshape(ll.shape[0], S) + ll, axis=1)
        p = logsumexp(ll, axis=1) - math.log(S) - e
        out.append((np.atleast_1d(e), np.atleast_1d(k), np.atleast_1d(p)))
    if not out:
        return np.empty(0), np.empty(0), np.empty(0)
    e, k, p = (np.concatenate([o[j] for o in out]) for j in range(3))
    return e, k, p


def loo_part(rows: ShardRows, e: np.ndarray, k: np.ndarray, p: np.ndarray, good_k: float, pointwise: bool) -> LooPart:
    high = np.flatnonzero(k >= K_THRESHOLD)
    index = rows.index
    refs = tuple(RowRef(rows.shard, rows.start + j, None if index is None else int(index[j])) for j in high.tolist())
    return LooPart(
        rows.shard,
        Moments.of(e),
        float(np.sum(p)),
        int(np.sum(k < K_THRESHOLD)),
        int(high.size),
        int(np.sum(k > good_k)),
        float(np.max(k)) if k.size else float("nan"),
        refs,
        e if pointwise else None,
        k if pointwise else None,
    )


@dataclass(frozen=True)
class LooTask:
    """PSIS-LOO of one model on a shard's rows with draws (chains, S, d) named `names` (the run's parameters)."""

    model: Model
    draws: np.ndarray
    r_eff: float
    good_k: float
    names: tuple[str, ...]
    pointwise: bool = False

    @property
    def models(self) -> tuple[Model, ...]:
        return (self.model,)

    def run(self, rows: tuple[ShardRows, ...]) -> LooPart:
        e, k, p = loo_rows(self.model, rows[0], flat_draws(self.draws), self.draws.shape[0], self.r_eff, self.names)
        return loo_part(rows[0], e, k, p, self.good_k, self.pointwise)


def r_eff(draws: np.ndarray, blocks: Sequence[Any]) -> float:
    """Relative efficiency of the thinned draws (chains, S, d), as `arviz_stats.loo` computes it: the mean "mean"
    ESS over every reported coordinate over the number of draws (1 for one chain)."""
    from arviz_stats.base import array_stats

    if draws.shape[0] == 1:
        return 1.0
    ess = array_stats.ess(natural_values(blocks, draws), chain_axis=0, draw_axis=1, method="mean")
    return float(np.mean(ess) / (draws.shape[0] * draws.shape[1]))


def good_k(n_samples: int) -> float:
    """The Pareto k above which arviz-stats warns, for `n_samples` draws."""
    return min(1.0 - 1.0 / math.log10(n_samples), K_THRESHOLD) if n_samples > 1 else K_THRESHOLD


def _elpd_data_cls() -> type:
    from arviz_stats.utils import ELPDData

    @dataclass
    class SiteLoo(ELPDData):
        """arviz-stats' `ELPDData` (so `arviz_stats.compare` and plots accept it) with where the sums came from:
        Pareto-k counts by band and the rows with k ≥ 0.7, by shard and position only."""

        k_ok: int = 0
        k_high: int = 0
        high_k_rows: tuple[RowRef, ...] = field(default=())

    return SiteLoo


_SITE_LOO: list[type] = []


def site_loo_class() -> type:
    """The `SiteLoo` class (built on first use: arviz-stats is imported only then)."""
    if not _SITE_LOO:
        _SITE_LOO.append(_elpd_data_cls())
    return _SITE_LOO[0]


def combine_loo(parts: Sequence[LooPart], n_samples: int, pointwise: bool) -> Any:
    """The shards' `LooPart`s as one `SiteLoo` (arviz-stats' ELPDData)."""
    elpd = Moments()
    for p in parts:
        elpd = elpd + p.elpd
    k_above = sum(p.k_above_good for p in parts)
    elpd_i: xr.DataArray | None = None
    pareto_k: xr.DataArray | None = None
    if pointwise:
        import xarray as xr

        e = np.concatenate([p.elpd_i for p in parts if p.elpd_i is not None])
        k = np.concatenate([p.pareto_k for p in parts if p.pareto_k is not None])
        elpd_i = xr.DataArray(e, dims=["obs"], name="y")
        pareto_k = xr.DataArray(k, dims=["obs"], name="y")
    cls = site_loo_class()
    return cls(
        kind="loo",
        elpd=elpd.total,
        se=elpd.se,
        p=float(sum(p.p_loo for p in parts)),
        n_samples=n_samples,
        n_data_points=elpd.n,
        scale="log",
        warning=bool(k_above > 0),
        good_k=good_k(n_samples),
        elpd_i=elpd_i,
        pareto_k=pareto_k,
        k_ok=sum(p.k_ok for p in parts),
        k_high=sum(p.k_high for p in parts),
        high_k_rows=tuple(r for p in parts for r in p.high_k_rows),
    )


def loo(
    result: Fit,
    *,
    executor: Executor | str | None = None,
    draws: DrawsArg = DEFAULT_DRAWS,
    pointwise: bool = False,
    shards: ShardSet | None = None,
) -> Any:
    """PSIS-LOO of the run on the rows it was fitted on, computed where they are (see the module docstring): an
    arviz-stats `ELPDData` (`SiteLoo`) with elpd, its SE, p_loo, Pareto-k counts and the rows with k ≥ 0.7.
    `pointwise=True` brings back one elpd and one k per row too (what `arviz_stats.compare` needs)."""
    model = model_of(result, "log_likelihood")
    data = shards if shards is not None else shards_of(result)
    thinned = thin_draws(result.draws, draws)
    S = thinned.shape[0] * thinned.shape[1]
    task = LooTask(
        model, thinned, r_eff(thinned, result.param_blocks), good_k(S), tuple(result.param_names), bool(pointwise)
    )
    parts = run_at_shards(task, [(s,) for s in data], executor_of(result, executor))
    return combine_loo(parts, S, bool(pointwise))
