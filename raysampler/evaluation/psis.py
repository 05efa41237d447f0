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
#: The Pareto k above which PSIS-LOO's estimate for an observation is unreliable (its row comes back by index).
K_THRESHOLD = 0.7
#: The smallest tail the generalized Pareto fit takes (arviz-stats refuses fewer than 5 draws in the tail).
MIN_TAIL = 5
#: Zhang–Stephens fit: the prior's scale for b (3 × the first quartile) and the weight (in draws) of the prior
#: N(0.5, ·) on k, as arviz-stats and R loo have them.
PRIOR_BS = 3.0
PRIOR_K = 10.0
#: Rows × grid points × tail draws held at once by the fit (bounds its memory, and keeps it in cache: 2 MB).
FIT_CELLS = 250_000
#: The fit's grid multiplies this many factors 1 − b x before one logarithm (`_grid_means`): a product of 8 factors
#: stays within float64's range unless a factor is beyond ~10^38 or below ~10^−38, which sends the row to log1p.
GROUP = 8
#: A grid point with |b| · max x below this has factors 1 − b x so close to 1 that rounding 1 − b x would cost more
#: than log1p's accuracy: its row is computed with log1p.
NEAR_ZERO_B = 1e-3


@dataclass(frozen=True)
class Tails:
    """Each row's tail: the positions (rows, M) of its M largest log-ratios in ascending order, their values (shifted
    so that the row's largest is 0), the same after smoothing (NaN in a row whose fit gave σ ≤ 0, as arviz-stats'
    quantiles are there; the raw values where no fit was made), and k̂ (NaN where the tail's values are all equal)."""

    where: np.ndarray
    raw: np.ndarray
    smoothed: np.ndarray
    k: np.ndarray


@dataclass(frozen=True)
class PointwiseLoo:
    """elpd_i, k̂_i, p_loo_i and whether the row is flat, for a block of rows (`loo_block`)."""

    elpd: np.ndarray
    k: np.ndarray
    p_loo: np.ndarray
    flat: np.ndarray


def good_k(n_samples: int) -> float:
    """The Pareto k above which arviz-stats warns, for `n_samples` draws."""
    return min(1.0 - 1.0 / math.log10(n_samples), K_THRESHOLD) if n_samples > 1 else K_THRESHOLD


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
    k_grid = _grid_means(b, x)
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


def _grid_means(b: np.ndarray, x: np.ndarray) -> np.ndarray:
    """k_j = mean_i log(1 − b_j x_i) for each row's grid b (rows, m) and tail x (rows, n): the fit's costliest step.

    The logarithm of a product of `GROUP` factors 1 − b_j x_i replaces `GROUP` calls of log1p (one log and a few
    multiplications, much less time: docs/performance.md, "Measurements behind choices in the code"). Each factor
    is rounded to within 1.1e-16 of itself (exactly when b x ≥ ½, by
    Sterbenz's lemma), and so is each product, so the sum of logs is within ~n · 3e-16 of the sum of log1p — the same
    order as log1p's own rounding — as long as the factor's rounding is small beside its logarithm (|b_j| x_max ≥
    `NEAR_ZERO_B`) and no product leaves float64's normal range. A row where either fails is computed with log1p."""
    rows, m = b.shape
    n = x.shape[1]
    groups = -(-n // GROUP)
    padded = np.zeros((rows, GROUP, groups))  # x laid out (GROUP, groups); a padding 0 is a factor 1
    padded.reshape(rows, -1)[:, :n] = x
    k_grid = np.empty((rows, m))
    step = max(1, FIT_CELLS // (m * groups * GROUP))
    part = np.empty((min(step, rows), m, GROUP, groups))
    for a in range(0, rows, step):
        c = min(step, rows - a)
        z = part[:c]
        np.multiply(-b[a : a + c, :, None, None], padded[a : a + c, None, :, :], out=z)
        z += 1.0
        prod = np.prod(z, axis=2)
        np.log(prod, out=prod)
        np.sum(prod, axis=2, out=k_grid[a : a + c])
    k_grid /= n
    with np.errstate(invalid="ignore"):
        exact = ~np.all(np.isfinite(k_grid), axis=1)  # a product that overflowed or reached 0
        exact |= np.any(np.abs(b) * x[:, -1:] < NEAR_ZERO_B, axis=1)
    if np.any(exact):
        at = np.flatnonzero(exact)
        k_grid[at] = np.mean(np.log1p(-b[at, :, None] * x[at, None, :]), axis=2)
    return k_grid


def gpd_quantiles(p: np.ndarray, kappa: np.ndarray, sigma: np.ndarray, mu: np.ndarray) -> np.ndarray:
    """Quantiles (rows, len(p)) of generalized Pareto distributions (k, σ, μ per row); NaN where σ ≤ 0."""
    k, s, m = kappa[:, None], sigma[:, None], mu[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(k == 0, m - s * np.log1p(-p), m + s * np.expm1(-k * np.log1p(-p)) / k)
    return np.where(s > 0, q, np.nan)


def fit_tails(lw: np.ndarray, r_eff: float) -> Tails:
    """The Pareto tails of rows of log-ratios (rows, S), each shifted so that its largest is 0 (steps 1–3 of the
    module docstring, before normalisation). ArgumentError naming `draws` when S is too small for a tail."""
    rows, S = lw.shape
    n = tail_length(S, r_eff)
    if n < MIN_TAIL:
        raise ArgumentError(
            ("draws",), f"Pareto smoothing needs at least {MIN_TAIL} draws in the tail: use more than {S} draws"
        )
    cut = S - n - 1
    top = np.argpartition(lw, cut, axis=1)[:, cut:]  # the cutoff (sorted into place) and the n largest after it
    values = np.take_along_axis(lw, top, axis=1)
    order = np.argsort(values[:, 1:], axis=1)
    where = np.take_along_axis(top[:, 1:], order, axis=1)
    raw = np.take_along_axis(values[:, 1:], order, axis=1)
    cutoff = values[:, 0]
    max_tail = raw[:, -1]
    fit = np.abs(max_tail - raw[:, 0]) >= np.finfo(float).tiny
    k = np.full(rows, np.nan)
    smoothed = raw.copy()
    if np.any(fit):
        exp_cut = np.exp(cutoff[fit])
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            kappa, sigma = gpd_fit(np.exp(raw[fit]) - exp_cut[:, None])
            k[fit] = kappa
            ok = np.isfinite(kappa)  # arviz-stats leaves a row whose fit failed unsmoothed
            q = np.log(gpd_quantiles(np.arange(0.5, n) / n, kappa[ok], sigma[ok], exp_cut[ok]))
        rows_ok = np.flatnonzero(fit)[ok]
        top_value = max_tail[rows_ok][:, None]
        smoothed[rows_ok] = np.where(q > top_value, top_value, q)
    return Tails(where, raw, smoothed, k)


def pareto_smooth(log_ratios: np.ndarray, r_eff: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """PSIS of each row of log-ratios (rows, S): normalised log weights (rows, S) and k̂ (rows,), as arviz-stats'
    `psislw(-log_ratios, r_eff)`. A row whose tail values are all equal has no tail to fit (arviz-stats refuses it):
    k̂ is NaN and its weights are only normalised. ArgumentError naming `draws` when S is too small for a tail."""
    lw = np.array(log_ratios, dtype=np.float64, ndmin=2)
    lw -= np.max(lw, axis=1, keepdims=True)
    tails = fit_tails(lw, r_eff)
    done = np.flatnonzero(np.isfinite(tails.k))
    lw[done[:, None], tails.where[done]] = tails.smoothed[done]
    lw -= row_logsumexp(lw)[:, None]
    return lw, tails.k


def loo_block(log_lik: np.ndarray, r_eff: float = 1.0) -> PointwiseLoo:
    """PSIS-LOO of a block of rows from their log-likelihood (rows, S), log-ratios −ll_i,s:

    * a flat row (span of ll_i below `FLAT_SPAN`): uniform weights, elpd_i = log mean_s exp(ll_i,s), k̂ = `FLAT_K`;
    * any other row: the weights of `pareto_smooth` (equal to arviz-stats' to rounding); a row whose fit fails (no
      tail to fit, or σ̂ ≤ 0, where arviz-stats gives NaN) keeps its raw weights and gets k̂ = ∞;

    elpd_i = log Σ_s w_s p(y_i | θ_s) and p_loo_i = lppd_i − elpd_i with lppd_i = log mean_s p(y_i | θ_s) (Vehtari et
    al. 2017, eqs. 10 and 4). Two passes of exp over the block: outside the tail a weight times p(y_i | θ_s) is the
    same for every draw (w_s ∝ 1 / p(y_i | θ_s) there), so only the tail's terms of the elpd are summed one by one."""
    ll = np.asarray(log_lik, dtype=np.float64)
    rows, S = ll.shape
    top, low = np.max(ll, axis=1), np.min(ll, axis=1)
    work = np.subtract(ll, top[:, None])  # one scratch block, reused: exp(ll − max) here, the weights below
    np.exp(work, out=work)
    lppd = np.log(np.sum(work, axis=1)) + top - math.log(S)
    flat = (top - low) < FLAT_SPAN
    elpd = lppd.copy()
    k = np.full(rows, FLAT_K)
    vary = np.flatnonzero(~flat)
    if vary.size:
        every = vary.size == rows
        lw = np.subtract(low[:, None], ll, out=work) if every else low[vary, None] - ll[vary]
        # lw: −ll shifted so that each row's largest log-ratio is 0, as arviz-stats has it
        tails = fit_tails(lw, r_eff)
        failed = ~np.isfinite(tails.k) | np.any(np.isnan(tails.smoothed), axis=1)
        tail = np.where(failed[:, None], tails.raw, tails.smoothed)
        np.exp(lw, out=lw)
        np.put_along_axis(lw, tails.where, 0.0, axis=1)
        log_norm = np.log(np.sum(lw, axis=1) + np.sum(np.exp(tail), axis=1))
        n = tail.shape[1]
        # outside the tail w_s p_s = exp(low) / norm for each of the S − n draws; in it, exp(tail_s + ll_s) / norm
        inside = row_logsumexp(tail + ll[vary[:, None], tails.where])
        elpd[vary] = np.logaddexp(math.log(S - n) + low[vary], inside) - log_norm
        k[vary] = np.where(failed, np.inf, tails.k)
    return PointwiseLoo(elpd, k, lppd - elpd, flat)


def row_logsumexp(a: np.ndarray) -> np.ndarray:
    """log Σ_s exp(a[r, s]) for each row r of a (rows, S), shifted by the row's maximum (a row of −∞ gives −∞)."""
    top = np.max(a, axis=1) if a.shape[1] else np.full(a.shape[0], -np.inf)
    shift = np.where(np.isfinite(top), top, 0.0)
    with np.errstate(divide="ignore"):
        return np.log(np.sum(np.exp(a - shift[:, None]), axis=1)) + shift
