"""Pareto-smoothed importance sampling (Vehtari et al. 2024, "Pareto smoothed importance sampling", JMLR 25) for a
whole block of rows at once, vectorised over rows in numpy: the same steps, in the same floating-point order, as
arviz-stats' `psislw` does one row at a time (its `_psislw`, `_ps_tail`, `_gpdfit` and `_gpinv`), so that the log
weights and k̂ agree with it to rounding; and the rule for rows whose log-ratios hardly vary (`FLAT_SPAN`).

Per row of log-ratios r (S draws; for LOO r = −log p(y_i | θ_s)):
  1. r − max r; the M = ⌊3 √(S / r_eff)⌋ largest (⌊S / 5⌋ when S · r_eff ≤ 225) form the tail, the next largest is the
     cutoff c;
  2. the tail's exceedances x = e^r − e^c are fitted by a generalized Pareto distribution with Zhang and Stephens'
     (2009) empirical-Bayes estimate, whose k̂ is pulled towards 0.5 by a weakly informative prior worth 10 draws;
  3. the tail's values are replaced by log of the fitted quantiles at (j − ½) / M, truncated at the largest raw
     value, and the row is normalised so that its weights sum to 1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..errors import ArgumentError

#: A row whose log-ratios span less than this (max − min over the draws) is "flat": its normalised importance
#: weights w_s satisfy e^(−δ) ≤ S · w_s ≤ e^δ for its span δ, so they are uniform to within e^δ − 1 ≈ δ, and it
#: gets uniform weights, elpd_i = log mean exp(ll_i) and k̂ = `FLAT_K` (docs/evaluation.md derives the bound).
FLAT_SPAN = 1e-3
#: The k̂ reported for a flat row: there is no tail to fit, the weights are uniform (its own band, never k ≥ 0.7).
FLAT_K = 0.0
#: The smallest tail the generalized Pareto fit takes (arviz-stats refuses fewer than 5 draws in the tail).
MIN_TAIL = 5
#: Zhang–Stephens fit: the prior's scale for b (3 × the first quartile) and the weight (in draws) of the prior
#: N(0.5, ·) on k (Vehtari et al. 2024, appendix C).
PRIOR_BS = 3.0
PRIOR_K = 10.0
#: Rows × grid points × tail draws held at once by the fit (bounds its memory: about 16 MB).
FIT_CELLS = 2_000_000


@dataclass(frozen=True)
class Smoothed:
    """A block of rows after Pareto smoothing: normalised log weights (rows, S), k̂ per row, and which rows were flat
    (span of their log-ratios below `FLAT_SPAN`: uniform weights, k̂ = `FLAT_K`)."""

    log_weights: np.ndarray
    k: np.ndarray
    flat: np.ndarray


def tail_length(n_draws: int, r_eff: float) -> int:
    """Draws in the tail that is fitted: 3 √(S / r_eff) when S · r_eff > 225, else S / 5, rounded down (never more
    than S / 5, so a cutoff below the tail always exists)."""
    if n_draws * r_eff > 225:
        return int(math.floor(3 * (n_draws / r_eff) ** 0.5))
    return int(math.floor(n_draws / 5))


def gpd_fit(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(k̂, σ̂) of a generalized Pareto distribution for each row of x (rows, n), sorted ascending and ≥ 0: Zhang and
    Stephens' estimate (the posterior mean of b = −k/σ over a grid of 30 + ⌊√n⌋ points, weighted by the profile
    likelihood), then k̂ shrunk towards 0.5 by the prior: k̂ = (n k + 10 · 0.5) / (n + 10)."""
    rows, n = x.shape
    m = 30 + int(n**0.5)
    grid = 1 - np.sqrt(m / (np.arange(1, m + 1, dtype=float) - 0.5))
    b = grid[None, :] / (PRIOR_BS * x[:, int(n / 4 + 0.5) - 1])[:, None]
    b += (1 / x[:, -1])[:, None]
    k_grid = np.empty((rows, m))
    step = max(1, FIT_CELLS // (m * n))
    for a in range(0, rows, step):
        z = b[a : a + step, :, None] * x[a : a + step, None, :]
        np.negative(z, out=z)
        np.log1p(z, out=z)
        k_grid[a : a + step] = np.mean(z, axis=2)
    len_scale = n * (np.log(-b / k_grid) - k_grid - 1)
    weights = np.exp(len_scale - row_logsumexp(len_scale)[:, None])
    keep = weights >= 10 * np.finfo(float).eps  # negligible grid points leave the mean, as in arviz-stats
    weights = np.where(keep, weights, 0.0)
    weights /= np.sum(weights, axis=1, keepdims=True)
    b_post = np.sum(np.where(keep, b * weights, 0.0), axis=1)
    kappa = np.mean(np.log1p(-b_post[:, None] * x), axis=1)
    sigma = -kappa / b_post
    kappa = (n * kappa + PRIOR_K * 0.5) / (n + PRIOR_K)
    return kappa, sigma


def gpd_quantiles(p: np.ndarray, kappa: np.ndarray, sigma: np.ndarray, mu: np.ndarray) -> np.ndarray:
    """Quantiles (rows, len(p)) of generalized Pareto distributions (k, σ, μ per row); NaN where σ ≤ 0."""
    k, s, m = kappa[:, None], sigma[:, None], mu[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(k == 0, m - s * np.log1p(-p), m + s * np.expm1(-k * np.log1p(-p)) / k)
    return np.where(s > 0, q, np.nan)


def pareto_smooth(log_ratios: np.ndarray, r_eff: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """PSIS of each row of log-ratios (rows, S): normalised log weights (rows, S) and k̂ (rows,), as arviz-stats'
    `psislw(-log_ratios, r_eff)`. A row whose tail values are all equal has no tail to fit (arviz-stats refuses it):
    k̂ is NaN and its weights are only normalised. ArgumentError naming `draws` when S is too small for a tail."""
    lw = np.array(log_ratios, dtype=np.float64, ndmin=2)
    rows, S = lw.shape
    n = tail_length(S, r_eff)
    if n < MIN_TAIL:
        raise ArgumentError(
            ("draws",), f"Pareto smoothing needs at least {MIN_TAIL} draws in the tail: use more than {S} draws"
        )
    lw -= np.max(lw, axis=1, keepdims=True)
    cut = S - n - 1
    top = np.argpartition(lw, cut, axis=1)[:, cut:]  # the cutoff (sorted into place) and the n largest after it
    values = np.take_along_axis(lw, top, axis=1)
    order = np.argsort(values[:, 1:], axis=1)
    where = np.take_along_axis(top[:, 1:], order, axis=1)
    tail = np.take_along_axis(values[:, 1:], order, axis=1)
    cutoff = values[:, 0]
    max_tail = tail[:, -1]
    fit = np.abs(max_tail - tail[:, 0]) >= np.finfo(float).tiny
    k = np.full(rows, np.nan)
    if np.any(fit):
        exp_cut = np.exp(cutoff[fit])
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            kappa, sigma = gpd_fit(np.exp(tail[fit]) - exp_cut[:, None])
            k[fit] = kappa
            ok = np.isfinite(kappa)  # arviz-stats leaves a row whose fit failed unsmoothed
            smoothed = np.log(gpd_quantiles(np.arange(0.5, n) / n, kappa[ok], sigma[ok], exp_cut[ok]))
        smooth = np.flatnonzero(fit)[ok]
        top_value = max_tail[smooth][:, None]
        lw[smooth[:, None], where[smooth]] = np.where(smoothed > top_value, top_value, smoothed)
    lw -= row_logsumexp(lw)[:, None]
    return lw, k


def smooth_rows(log_lik: np.ndarray, r_eff: float = 1.0) -> Smoothed:
    """PSIS-LOO weights of a block of rows from their log-likelihood (rows, S) (log-ratios −ll): flat rows (span
    below `FLAT_SPAN`) get uniform weights and k̂ = `FLAT_K`; every other row is Pareto-smoothed (`pareto_smooth`)."""
    ll = np.asarray(log_lik, dtype=np.float64)
    rows, S = ll.shape
    flat = (np.max(ll, axis=1) - np.min(ll, axis=1)) < FLAT_SPAN
    lw = np.full((rows, S), -math.log(S)) if rows else np.empty((0, S))
    k = np.full(rows, FLAT_K)
    vary = np.flatnonzero(~flat)
    if vary.size:
        lw_v, k_v = pareto_smooth(-ll[vary], r_eff)
        failed = ~np.isfinite(k_v) | ~np.all(np.isfinite(lw_v), axis=1)
        if np.any(failed):  # no tail to fit, or a fit with σ ≤ 0: the raw weights, and k̂ = ∞ (unreliable)
            raw = -ll[vary[failed]]
            lw_v[failed] = raw - row_logsumexp(raw)[:, None]
            k_v[failed] = np.inf
        lw[vary], k[vary] = lw_v, k_v
    return Smoothed(lw, k, flat)


def row_logsumexp(a: np.ndarray) -> np.ndarray:
    """log Σ_s exp(a[r, s]) for each row r of a (rows, S), shifted by the row's maximum (a row of −∞ gives −∞)."""
    top = np.max(a, axis=1) if a.shape[1] else np.full(a.shape[0], -np.inf)
    shift = np.where(np.isfinite(top), top, 0.0)
    with np.errstate(divide="ignore"):
        return np.log(np.sum(np.exp(a - shift[:, None]), axis=1)) + shift
