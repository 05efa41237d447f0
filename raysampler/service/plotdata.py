"""Data for the dashboard's diagnostic plots of one parameter, computed with arviz-stats on a bounded, evenly thinned
window of the stored draws: rank histograms per chain, autocorrelation per chain, and bulk and tail ESS as the draws
grow. The answer's size depends on the chain count and the bounds asked for, never on the run's length."""

from __future__ import annotations

import math

import numpy as np

from .drawfiles import DrawFiles
from .errors import NotFound, StateConflict
from .records import RunRecord
from .results import MIN_SUMMARY_DRAWS, natural_column
from .schemas import ParamDiagnostics


def _finite(v: float) -> float | None:
    return float(v) if math.isfinite(v) else None


def param_diagnostics(
    rec: RunRecord, files: DrawFiles, param: int, max_draws: int, max_lag: int, rank_bins: int, ess_points: int
) -> ParamDiagnostics:
    """Rank histograms, autocorrelation and ESS evolution of coordinate `param` on at most `max_draws` per chain of
    the stored draws (evenly thinned, natural scale). 404 for a coordinate the run lacks; 409 with too few draws."""
    from arviz_base import rcParams
    from arviz_stats.base import array_stats as azs

    names = list(rec.param_names or [])
    if param >= len(names):
        raise NotFound(
            f"run {rec.id} has no parameter {param} (it has {len(names)}: param is a position in param_names)"
        )
    n = rec.draws_stored
    if n < MIN_SUMMARY_DRAWS:
        raise StateConflict(f"run {rec.id} has {n} draws per chain stored; diagnostics need {MIN_SUMMARY_DRAWS}")
    step = max(1, math.ceil(n / max_draws))
    column = natural_column(rec, files, 0, n, step, param)  # (m, chains)
    x = np.ascontiguousarray(np.asarray(column, dtype=np.float64).T)  # (chains, m)
    chains, m = x.shape

    bins = max(1, min(rank_bins, m))
    ranks = np.asarray(azs.compute_ranks(x.ravel())).reshape(x.shape)  # 1 … chains·m over all chains
    edges = np.linspace(0.5, chains * m + 0.5, bins + 1)
    rank_counts = [np.histogram(r, bins=edges)[0].astype(int).tolist() for r in ranks]

    lags = max(0, min(max_lag, m - 1))
    ac = np.asarray(azs.autocorr(x, axis=-1))[:, : lags + 1]
    autocorr = [[_finite(v) for v in row] for row in ac.tolist()]

    points = sorted({max(MIN_SUMMARY_DRAWS, round(m * (i + 1) / ess_points)) for i in range(ess_points)})
    points = [k for k in points if k <= m]
    prob = rcParams["stats.ci_prob"]  # the tail quantiles the summary table's ess_tail uses
    ess_bulk = [_finite(float(azs.ess(x[:, :k], method="bulk"))) for k in points]
    ess_tail = [_finite(float(azs.ess(x[:, :k], method="tail", prob=prob))) for k in points]
    r_hat = _finite(float(azs.rhat(x, method="rank"))) if chains > 1 else None
    return ParamDiagnostics(
        run_id=rec.id,
        param=param,
        name=names[param],
        draws_stored=n,
        chains=chains,
        step=step,
        draws_used=m,
        rank_bins=bins,
        rank_counts=rank_counts,
        autocorr=autocorr,
        ess_draws=[min(n, k * step) for k in points],
        ess_bulk=ess_bulk,
        ess_tail=ess_tail,
        r_hat=r_hat,
    )
