"""PSIS-LOO at the shards: each shard's rows are evaluated and Pareto-smoothed where they live, and only sums come
back (`LooPart`), merged into arviz-stats' own `ELPDData` (`SiteLoo`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ..enums import Executor
from ..errors import ArgumentError
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
from .psis import FLAT_SPAN, K_THRESHOLD, PointwiseLoo, good_k, loo_block
from .records import HighRow, LooPart, Moments, RowRef
from .shard_tasks import ShardRows, run_at_shards

#: rows the printed LOO names after its warning (all are in `.warning_rows`)
WARN_SHOWN = 5

if TYPE_CHECKING:
    import xarray as xr

    from .moment_match import MatchedRow


def loo_rows(model: Model, rows: ShardRows, theta: np.ndarray, r_eff: float, names: tuple[str, ...]) -> PointwiseLoo:
    """PSIS-LOO of every row, in blocks of BLOCK_ROWS rows: each block's log-likelihood under the draws theta (S, d),
    then `psis.loo_block` (the batched Pareto smoothing, flat rows with uniform weights)."""
    out: list[PointwiseLoo] = []
    for a in range(0, rows.X.shape[0], BLOCK_ROWS):
        Xb, yb = rows.X[a : a + BLOCK_ROWS], rows.y[a : a + BLOCK_ROWS]
        ll = np.atleast_2d(model.log_likelihood(Xb, yb, model.evaluation_x(Xb, yb, theta, names, 0)))
        out.append(loo_block(ll, r_eff))
        del ll
    if not out:
        empty = np.empty(0)
        return PointwiseLoo(empty, empty, empty, np.zeros(0, dtype=bool))
    return PointwiseLoo(*(np.concatenate([getattr(o, f) for o in out]) for f in ("elpd", "k", "p_loo", "flat")))


def loo_part(rows: ShardRows, pw: PointwiseLoo, good_k: float, pointwise: bool) -> LooPart:
    """A range of rows' `LooPart` from their pointwise values: flat rows, rows below 0.7 and rows at or above it (a
    k̂ of ∞, a fit that failed, counts as high)."""
    e, k, p, flat = pw.elpd, pw.k, pw.p_loo, pw.flat
    high = ~flat & ~(k < K_THRESHOLD)
    low = ~high
    ok = low & ~flat
    index = rows.index
    at = np.flatnonzero(high)

    def ref(j: int | np.integer) -> RowRef:
        return RowRef(rows.shard, rows.start + int(j), None if index is None else int(index[j]))

    warned = np.flatnonzero(ok & (k > good_k))
    return LooPart(
        rows.shard,
        Moments.of(e[low]),
        float(np.sum(p[low])),
        int(np.sum(flat)),
        int(np.sum(ok)),
        int(np.sum(ok & (k > good_k))),
        float(np.max(k[ok])) if np.any(ok) else float("nan"),
        tuple(HighRow(ref(j), float(e[j]), float(p[j]), float(k[j])) for j in at),
        e if pointwise else None,
        k if pointwise else None,
        flat if pointwise else None,
        tuple(HighRow(ref(j), float(e[j]), float(p[j]), float(k[j])) for j in warned),
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
        pw = loo_rows(self.model, rows[0], flat_draws(self.draws), self.r_eff, self.names)
        return loo_part(rows[0], pw, self.good_k, self.pointwise)


def r_eff(draws: np.ndarray, blocks: Sequence[Any]) -> float:
    """Relative efficiency of the thinned draws (chains, S, d), as `arviz_stats.loo` computes it: the mean "mean"
    ESS over every reported coordinate over the number of draws (1 for one chain)."""
    from arviz_stats.base import array_stats

    if draws.shape[0] == 1:
        return 1.0
    ess = array_stats.ess(natural_values(blocks, draws), chain_axis=0, draw_axis=1, method="mean")
    return float(np.mean(ess) / (draws.shape[0] * draws.shape[1]))


def _elpd_data_cls() -> type:
    from arviz_stats.utils import ELPDData

    @dataclass
    class SiteLoo(ELPDData):
        """arviz-stats' `ELPDData` (so `arviz_stats.compare` and plots accept it) with where the sums came from:
        Pareto-k̂ counts by band — flat rows (log-likelihood span below `flat_span`: uniform weights, k̂ = 0), the
        others below 0.7 and at or above it — the rows with k̂ ≥ 0.7 by shard and position only, and, after
        `moment_match=True`, what moment matching did to each row it took (`MatchedRow`)."""

        k_flat: int = 0
        k_ok: int = 0
        k_high: int = 0
        high_k_rows: tuple[RowRef, ...] = field(default=())
        flat_span: float = FLAT_SPAN
        flat_i: Any = None
        moment_matched: tuple[Any, ...] | None = None
        #: every row arviz-stats' warning is about (k̂ above `good_k`), with its k̂, largest first
        warning_rows: tuple[HighRow, ...] = field(default=())

        def __str__(self) -> str:
            lines = [
                super().__str__(),
                "",
                f"Pareto k̂ bands: flat (span < {self.flat_span:g}, uniform weights) {self.k_flat}, "
                f"k̂ < {K_THRESHOLD} {self.k_ok}, k̂ ≥ {K_THRESHOLD} {self.k_high}",
            ]
            if self.warning_rows:
                shown = ", ".join(
                    f"shard {h.ref.shard} row {h.ref.row} (k̂ {h.k:.2f})" for h in self.warning_rows[:WARN_SHOWN]
                )
                more = len(self.warning_rows) - WARN_SHOWN
                lines.append(
                    f"The warning: {len(self.warning_rows)} rows with k̂ > {self.good_k:.2f} (the bound for "
                    f"{self.n_samples} draws): {shown}" + (f" and {more} more (.warning_rows)" if more > 0 else "")
                )
            if self.moment_matched is not None:
                better = sum(1 for m in self.moment_matched if m.k_after < K_THRESHOLD)
                lines.append(
                    f"Moment matching: {len(self.moment_matched)} rows with k̂ ≥ {K_THRESHOLD}, {better} now below"
                )
            return "\n".join(lines)

        __repr__ = __str__

    return SiteLoo


_SITE_LOO: list[type] = []


def site_loo_class() -> type:
    """The `SiteLoo` class (built on first use: arviz-stats is imported only then)."""
    if not _SITE_LOO:
        _SITE_LOO.append(_elpd_data_cls())
    return _SITE_LOO[0]


def combine_loo(
    parts: Sequence[LooPart], n_samples: int, pointwise: bool, matched: tuple[MatchedRow, ...] | None = None
) -> Any:
    """The shards' `LooPart`s as one `SiteLoo` (arviz-stats' ELPDData): the rows with k̂ ≥ 0.7 (`LooPart.high`, with
    their values after moment matching, if any) are added to the sums here and counted in the band of their k̂."""
    good = good_k(n_samples)
    high = [h for p in parts for h in p.high]
    elpd = Moments()
    for p in parts:
        elpd = elpd + p.elpd
    elpd = elpd + Moments.of(np.array([h.elpd for h in high]))
    still = [h for h in high if not h.k < K_THRESHOLD]
    now_ok = [h for h in high if h.k < K_THRESHOLD]
    k_above = sum(p.k_above_good for p in parts) + len(still) + sum(1 for h in now_ok if h.k > good)
    warned = [h for p in parts for h in p.warned] + still + [h for h in now_ok if h.k > good]
    warned.sort(key=lambda h: -math.inf if math.isnan(h.k) else -h.k)  # largest k̂ first, failed fits before all
    elpd_i: xr.DataArray | None = None
    pareto_k: xr.DataArray | None = None
    flat_i: xr.DataArray | None = None
    if pointwise:
        import xarray as xr

        def joined(name: str) -> np.ndarray:
            return np.concatenate([getattr(p, name) for p in parts if getattr(p, name) is not None])

        elpd_i = xr.DataArray(joined("elpd_i"), dims=["obs"], name="y")
        pareto_k = xr.DataArray(joined("pareto_k"), dims=["obs"], name="y")
        flat_i = xr.DataArray(joined("flat_i"), dims=["obs"], name="y")
    cls = site_loo_class()
    return cls(
        kind="loo",
        elpd=elpd.total,
        se=elpd.se,
        p=float(sum(p.p_loo for p in parts) + sum(h.p_loo for h in high)),
        n_samples=n_samples,
        n_data_points=elpd.n,
        scale="log",
        warning=bool(k_above > 0),
        good_k=good,
        elpd_i=elpd_i,
        pareto_k=pareto_k,
        k_flat=sum(p.k_flat for p in parts),
        k_ok=sum(p.k_ok for p in parts) + len(now_ok),
        k_high=len(still),
        high_k_rows=tuple(h.ref for h in still),
        flat_i=flat_i,
        moment_matched=matched,
        warning_rows=tuple(warned),
    )


def loo(
    result: Fit,
    *,
    executor: Executor | str | None = None,
    draws: DrawsArg = DEFAULT_DRAWS,
    pointwise: bool = False,
    moment_match: bool = False,
    shards: ShardSet | None = None,
) -> Any:
    """PSIS-LOO of the run on the rows it was fitted on, computed where they are (see the package docstring): an
    arviz-stats `ELPDData` (`SiteLoo`) with elpd, its SE, p_loo, Pareto-k̂ counts by band and the rows with
    k̂ ≥ 0.7. `pointwise=True` brings back one elpd, k̂ and flatness per row too (what `arviz_stats.compare` needs).
    `moment_match=True` then improves the rows with k̂ ≥ 0.7 by moment matching at the shards (`moment_match.py`)."""
    if not isinstance(moment_match, bool):
        raise ArgumentError(("moment_match",), f"moment_match must be True or False, got {moment_match!r}")
    model = model_of(result, "log_likelihood")
    if moment_match:
        from .moment_match import check_matchable

        check_matchable(model)
    data = shards if shards is not None else shards_of(result)
    thinned = thin_draws(result.draws, draws)
    S = thinned.shape[0] * thinned.shape[1]
    reff = r_eff(thinned, result.param_blocks)
    task = LooTask(model, thinned, reff, good_k(S), tuple(result.param_names), bool(pointwise))
    exe = executor_of(result, executor)
    parts = run_at_shards(task, [(s,) for s in data], exe)
    if not moment_match:
        return combine_loo(parts, S, bool(pointwise))
    from .moment_match import match_high_rows

    parts, matched = match_high_rows(model, parts, thinned, reff, tuple(result.param_names), data, exe)
    return combine_loo(parts, S, bool(pointwise), matched)
