"""Moment matching for PSIS-LOO at the shards (Paananen et al. 2021, "Implicitly adaptive importance sampling",
Statistics and Computing 31; the algorithm of R loo's `loo_moment_match`), for the rows whose Pareto k̂ is ≥ 0.7.

For such a row i the draws θ_s are moved by affine maps — a shift to the importance-weighted mean, then also a
scaling to the weighted marginal variances, then a map to the weighted covariance — each kept only if it lowers k̂,
and the importance ratios of the moved draws θ'_s = T(θ_s) are

    log r_s = log p(θ'_s | y) − log p(y_i | θ'_s) − log p(θ_s | y) + log |det T|   (the last term is constant),

with log p(θ | y) = −U_0(θ) + Σ_j Σ_{rows of shard j} log p(y | θ) + const: the prior's term here, each shard's own
sum where its rows live (`LogLikSums`: only S sums per set of draws travel). The row's own part — its likelihood at
the moved draws, the Pareto smoothing, the weighted moments of the next map, the final elpd — is computed by the
shard that holds it (`RowStepTask`, `RowFinalTask`); the row never leaves it. Finally half of the draws are moved by
the composed map T and the other half are not, and the row's elpd is estimated by multiple importance sampling over
that mixture (the "split" step), with T⁻¹ the exact inverse of the composed map.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ..enums import Executor
from ..errors import ArgumentError
from ..models.contract import Model
from ..shards import ShardSet
from .fits import BLOCK_ROWS, flat_draws
from .psis import good_k, pareto_smooth, row_logsumexp
from .records import HighRow, LooPart, RowRef
from .shard_tasks import ShardRows, ShardSession

#: Most affine maps tried for one row (R loo's `max_iters`).
MAX_ITERS = 30
#: The full covariance is matched only with at least this many draws per coordinate (as R loo does).
COV_DRAWS_PER_DIM = 10
#: Log-likelihood values a shard holds at once while it sums them over its rows (rows × draws): 32 MB.
SUM_CELLS = 4_000_000


def check_matchable(model: Model) -> None:
    """ArgumentError naming `moment_match` for a model whose draws cannot be moved and re-weighed: with group
    effects the run's draws hold each group's r on its natural scale, while the shards' potentials are densities
    of the sampler's non-centred coordinates, which only the workers of the run had (and a group absent from a
    shard has no potential there)."""
    if model.has_local_params():
        raise ArgumentError(
            ("moment_match",),
            f"moment_match=True is not available for {type(model).__name__} with group effects: the posterior "
            "density of moved draws needs the group effects in the sampler's own coordinates, which the run's draws "
            "do not hold; use moment_match=False (PSIS-LOO), whose high-k rows come back by position",
        )


@dataclass(frozen=True)
class MatchedRow:
    """What moment matching did to one row with k̂ ≥ 0.7: its place, its k̂ and elpd_i by PSIS and after matching,
    the Monte-Carlo SE of the matched elpd_i, how many maps it kept, and whether the matched values replace the PSIS
    ones (only when k̂ went down, as R loo does)."""

    ref: RowRef
    k_psis: float
    k_after: float
    elpd_psis: float
    elpd_after: float
    mcse_after: float
    maps: int
    used: bool


# ----------------------------------------------------------------------------------------------- at the shards


@dataclass(frozen=True)
class LogLikSums:
    """Σ over a shard's rows of log p(y | θ) for each of C sets of S draws: (C, S); sums add up exactly."""

    values: np.ndarray

    def __add__(self, o: LogLikSums) -> LogLikSums:
        return LogLikSums(self.values + o.values)


@dataclass(frozen=True)
class LogLikSumTask:
    """A shard's log-likelihood summed over its rows at C sets of draws (C, S, d): blocks of rows times sets of
    draws of at most `SUM_CELLS` values at once."""

    model: Model
    draws: np.ndarray
    names: tuple[str, ...]

    def run_held(self, rows: tuple[ShardRows, ...], kept: dict[str, Any]) -> LogLikSums:
        r = rows[0]
        C, S, d = self.draws.shape
        flat = self.draws.reshape(C * S, d)
        out = np.zeros(C * S)
        n = r.X.shape[0]
        block = max(1, min(n, BLOCK_ROWS))
        sets = max(1, SUM_CELLS // (block * S))
        for a in range(0, n, block):
            Xb, yb = r.X[a : a + block], r.y[a : a + block]
            for c in range(0, C, sets):
                x = self.model.evaluation_x(Xb, yb, flat[c * S : (c + sets) * S], self.names, 0)
                out[c * S : (c + sets) * S] += np.sum(np.atleast_2d(self.model.log_likelihood(Xb, yb, x)), axis=0)
        return LogLikSums(out.reshape(C, S))


@dataclass(frozen=True)
class WeightedMoments:
    """Importance-weighted moments of a row's draws (S, d): mean, mean of squares and covariance (weights summing to
    1), from which the next affine map is built; d + d + d² numbers, never the row."""

    mean: np.ndarray
    second: np.ndarray
    cov: np.ndarray


@dataclass(frozen=True)
class RowCandidate:
    """Moved draws (S, d) of one row and the full posterior's log density there, up to a constant (S,)."""

    ref: RowRef
    draws: np.ndarray
    log_prob: np.ndarray


@dataclass(frozen=True)
class RowStep:
    """The shard's verdict on a row's candidate: the k̂ of its PSIS weights and their weighted moments."""

    ref: RowRef
    k: float
    moments: WeightedMoments


@dataclass(frozen=True)
class RowSteps:
    """The `RowStep`s of the rows a range of a shard holds; they add up by joining."""

    steps: tuple[Any, ...] = ()

    def __add__(self, o: RowSteps) -> RowSteps:
        return RowSteps(self.steps + o.steps)


def _held_row(rows: tuple[ShardRows, ...], ref: RowRef) -> tuple[np.ndarray, np.ndarray] | None:
    """Row `ref` as (X (1, p), y (1,)) when this range of its shard holds it, else None."""
    r = rows[0]
    j = ref.row - r.start
    if ref.shard != r.shard or not 0 <= j < r.X.shape[0]:
        return None
    return r.X[j : j + 1], r.y[j : j + 1]


def _row_log_lik(model: Model, X: np.ndarray, y: np.ndarray, draws: np.ndarray, names: tuple[str, ...]) -> np.ndarray:
    return np.atleast_2d(model.log_likelihood(X, y, model.evaluation_x(X, y, draws, names, 0)))[0]


def _clean(log_ratios: np.ndarray) -> np.ndarray:
    """Ratios that are NaN or +∞ (a density that failed) get weight 0, as R loo and arviz-stats do."""
    return np.where(np.isnan(log_ratios) | np.isposinf(log_ratios), -np.inf, log_ratios)


def _weighted_moments(draws: np.ndarray, log_weights: np.ndarray, with_cov: bool) -> WeightedMoments:
    """Moments of the draws under normalised log weights; the covariance only when the covariance map may be tried."""
    w = np.exp(log_weights)
    mean = w @ draws
    d = draws.shape[1]
    cov = np.atleast_2d(np.cov(draws, rowvar=False, aweights=w, ddof=0)) if with_cov else np.zeros((d, d))
    return WeightedMoments(mean, w @ draws**2, cov)


@dataclass(frozen=True)
class RowStepTask:
    """For each candidate of a row this shard holds: the row's log-likelihood at the moved draws, the log-ratios
    −ll_i + log p(θ') − log p(θ), their PSIS weights (k̂) and weighted moments (R loo's `update_quantities_i`)."""

    model: Model
    names: tuple[str, ...]
    orig_log_prob: np.ndarray
    r_eff: float
    candidates: tuple[RowCandidate, ...]
    with_cov: bool

    def run_held(self, rows: tuple[ShardRows, ...], kept: dict[str, Any]) -> RowSteps:
        out = []
        for c in self.candidates:
            held = _held_row(rows, c.ref)
            if held is None:
                continue
            ll = _row_log_lik(self.model, *held, c.draws, self.names)
            lw, k = pareto_smooth(_clean(-ll + c.log_prob - self.orig_log_prob)[None, :], self.r_eff)
            failed = not np.isfinite(k[0]) or bool(np.any(np.isnan(lw)))  # no usable tail fit: never an improvement
            out.append(
                RowStep(c.ref, math.inf if failed else float(k[0]), _weighted_moments(c.draws, lw[0], self.with_cov))
            )
        return RowSteps(tuple(out))


@dataclass(frozen=True)
class SplitCandidate:
    """A row's split proposal: the draws with their first half moved by T (S, d), the full posterior's log density
    there (S,) and at T⁻¹ of them, less log |det T| (S,): the two halves of the mixture the draws come from."""

    ref: RowRef
    draws: np.ndarray
    log_prob: np.ndarray
    log_prob_inv: np.ndarray


@dataclass(frozen=True)
class RowFinal:
    """A row's elpd_i and p_loo_i after moment matching, and the Monte-Carlo SE of elpd_i."""

    ref: RowRef
    elpd: float
    p_loo: float
    mcse: float


@dataclass(frozen=True)
class RowFinals:
    finals: tuple[Any, ...] = ()

    def __add__(self, o: RowFinals) -> RowFinals:
        return RowFinals(self.finals + o.finals)


@dataclass(frozen=True)
class RowFinalTask:
    """For each split proposal of a row this shard holds: multiple importance sampling over the two halves,
    log r_s = −ll_i(θ'_s) + log p(θ'_s) − log(p(θ'_s) + p(T⁻¹θ'_s) / |det T|), Pareto-smoothed; elpd_i =
    log Σ_s w_s p(y_i | θ'_s), p_loo_i = lppd_i (on the original draws) − elpd_i."""

    model: Model
    names: tuple[str, ...]
    draws: np.ndarray
    r_eff: float
    candidates: tuple[SplitCandidate, ...]

    def run_held(self, rows: tuple[ShardRows, ...], kept: dict[str, Any]) -> RowFinals:
        out = []
        S = self.draws.shape[0]
        for c in self.candidates:
            held = _held_row(rows, c.ref)
            if held is None:
                continue
            ll = _row_log_lik(self.model, *held, c.draws, self.names)
            raw = _clean(-ll + c.log_prob - np.logaddexp(c.log_prob, c.log_prob_inv))
            lw = pareto_smooth(raw[None, :], self.r_eff)[0][0]
            elpd = float(row_logsumexp((lw + ll)[None, :])[0])
            lppd = float(row_logsumexp(_row_log_lik(self.model, *held, self.draws, self.names)[None, :])[0])
            out.append(RowFinal(c.ref, elpd, lppd - math.log(S) - elpd, _mcse(lw, ll, elpd, self.r_eff)))
        return RowFinals(tuple(out))


def _mcse(log_weights: np.ndarray, ll: np.ndarray, elpd: float, r_eff: float) -> float:
    """Monte-Carlo SE of elpd_i = log Σ w_s p_s by the delta method: √(Σ w_s² (p_s − E)² / r_eff) / E, E = Σ w_s p_s
    (the self-normalised importance sampling variance, scaled by the draws' relative efficiency)."""
    w = np.exp(log_weights)
    rel = np.exp(ll - elpd)  # p_s / E
    return float(math.sqrt(np.sum(w**2 * (rel - 1.0) ** 2) / max(r_eff, 1e-12)))


# ----------------------------------------------------------------------------------------------- the caller's side


@dataclass
class _Match:
    """One row's moment matching as the caller follows it: the composed map T(θ) = A θ + b of the maps kept so far,
    the moved draws, the current k̂ and weighted moments, and which map is tried next."""

    high: HighRow
    draws: np.ndarray
    A: np.ndarray
    b: np.ndarray
    k: float
    moments: WeightedMoments
    maps: int = 0
    stage: int = 0  # 0: shift, 1: shift and scale, 2: shift and covariance
    done: bool = False
    trial: tuple[np.ndarray, np.ndarray, np.ndarray] | None = field(default=None)  # (draws, L, shift) on trial


def _propose(m: _Match, allow_cov: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """The next affine map of `m`'s stage as (moved draws, L, s) with x' = L (x − μ) + μ + s (μ the current mean, s
    the weighted mean minus μ); None when no map is left to try."""
    x = m.draws
    S, d = x.shape
    mu = x.mean(axis=0)
    mean_w = m.moments.mean
    shift = mean_w - mu
    if m.stage == 0:
        return x + shift, np.eye(d), shift
    if m.stage == 1:
        var_w = (m.moments.second - mean_w**2) * S / (S - 1)
        var = np.var(x, axis=0, ddof=1)
        scale = np.ones(d)
        ok = (var > 1e-9) & (var_w > 1e-9)
        scale[ok] = np.sqrt(var_w[ok] / var[ok])
        return (x - mu) * scale + mean_w, np.diag(scale), shift
    if m.stage == 2 and allow_cov:
        cov = np.atleast_2d(np.cov(x, rowvar=False, ddof=1))
        cov_w = m.moments.cov.copy()
        L = np.eye(d)
        try:
            for c in (cov, cov_w):
                low = float(np.min(np.linalg.eigvalsh(c)))
                if low <= 0:
                    c += np.eye(d) * (1e-6 - low)
            L = np.linalg.cholesky(cov_w) @ np.linalg.inv(np.linalg.cholesky(cov))
        except np.linalg.LinAlgError:
            return None
        return (x - mu) @ L.T + mean_w, L, shift
    return None


def _log_prob(session: ShardSession, model: Model, sets: np.ndarray, names: tuple[str, ...]) -> np.ndarray:
    """log p(θ | y) up to a constant at C sets of S draws (C, S, d): minus the prior's potential, plus every shard's
    sum of its rows' log-likelihoods (only those sums come back)."""
    total = LogLikSums(np.zeros(sets.shape[:2]))
    for part in session.run(LogLikSumTask(model, sets, names)):
        total = total + part
    prior = model.prior()
    return total.values - prior.potential(sets.reshape(-1, sets.shape[2])).reshape(sets.shape[:2])


def _steps(session: ShardSession, task: RowStepTask) -> dict[RowRef, RowStep]:
    out: dict[RowRef, RowStep] = {}
    for part in session.run(task):
        out.update({s.ref: s for s in part.steps})
    return out


def match_high_rows(
    model: Model,
    parts: Sequence[LooPart],
    thinned: np.ndarray,
    r_eff: float,
    names: tuple[str, ...],
    data: ShardSet,
    executor: Executor,
) -> tuple[list[LooPart], tuple[MatchedRow, ...]]:
    """Moment matching of every row with k̂ ≥ 0.7 in `parts`, all rows in step (one round of the shards per map
        tried), over a `ShardSession` that keeps nothing between rounds (on Ray, warm task workers read the rows again:
    no actor to start). The parts come back with those rows' values replaced
        where matching lowered k̂ (pointwise values too), and one `MatchedRow` per row."""
    high = [h for p in parts for h in p.high]
    if not high:
        return list(parts), ()
    theta = flat_draws(thinned)
    S, d = theta.shape
    threshold = good_k(S)
    allow_cov = COV_DRAWS_PER_DIM * d <= S
    with ShardSession((model,), [(s,) for s in data], executor, hold=False) as session:
        orig = _log_prob(session, model, theta[None], names)[0]
        start = RowStepTask(model, names, orig, r_eff, tuple(RowCandidate(h.ref, theta, orig) for h in high), allow_cov)
        first = _steps(session, start)
        rows = [
            _Match(h, theta, np.eye(d), np.zeros(d), first[h.ref].k, first[h.ref].moments, done=False) for h in high
        ]
        for m in rows:
            m.done = not m.k > threshold
        while True:
            trying = []
            for m in rows:
                while not m.done:
                    if m.maps + 1 >= MAX_ITERS:
                        m.done = True
                        break
                    m.trial = _propose(m, allow_cov)
                    if m.trial is not None:
                        trying.append(m)
                        break
                    m.done = True
            if not trying:
                break
            sets = np.stack([m.trial[0] for m in trying if m.trial is not None])
            lp = _log_prob(session, model, sets, names)
            cands = tuple(RowCandidate(m.high.ref, s, p) for m, s, p in zip(trying, sets, lp))
            verdict = _steps(session, RowStepTask(model, names, orig, r_eff, cands, allow_cov))
            for m in trying:
                step = verdict[m.high.ref]
                assert m.trial is not None
                moved, L, shift = m.trial
                mu = m.draws.mean(axis=0)
                if step.k < m.k:
                    m.draws, m.k, m.moments = moved, step.k, step.moments
                    m.A, m.b = L @ m.A, L @ (m.b - mu) + mu + shift
                    m.maps += 1
                    m.stage = 0
                    m.done = not m.k > threshold
                else:
                    m.stage += 1
                m.trial = None
        finals = _split(session, model, names, theta, r_eff, [m for m in rows if m.maps > 0])
    matched = []
    for m in rows:
        f = finals.get(m.high.ref)
        used = f is not None and m.k < m.high.k
        matched.append(
            MatchedRow(
                m.high.ref,
                m.high.k,
                m.k if used else m.high.k,
                m.high.elpd,
                f.elpd if used and f is not None else m.high.elpd,
                f.mcse if f is not None else math.nan,
                m.maps,
                used,
            )
        )
    return _patched(parts, {r.ref: r for r in matched}, finals), tuple(matched)


def _split(
    session: ShardSession,
    model: Model,
    names: tuple[str, ...],
    theta: np.ndarray,
    r_eff: float,
    rows: list[_Match],
) -> dict[RowRef, RowFinal]:
    """The split step for every row that kept a map: the first half of the draws (in each chain's order, as
    flattened) moved by T, the rest not; the full posterior's log density at those draws and at their images by
    T⁻¹; then each row's shard weighs them (`RowFinalTask`)."""
    if not rows:
        return {}
    S = theta.shape[0]
    half = S // 2
    moved, inverse, log_det = [], [], []
    for m in rows:
        forward = theta @ m.A.T + m.b
        back = np.linalg.solve(m.A, (theta - m.b).T).T
        draws = theta.copy()
        draws[:half] = forward[:half]
        inv = theta.copy()
        inv[half:] = back[half:]
        moved.append(draws)
        inverse.append(inv)
        log_det.append(float(np.linalg.slogdet(m.A)[1]))
    lp = _log_prob(session, model, np.stack(moved + inverse), names)
    n = len(rows)
    cands = tuple(SplitCandidate(m.high.ref, moved[j], lp[j], lp[n + j] - log_det[j]) for j, m in enumerate(rows))
    out: dict[RowRef, RowFinal] = {}
    for part in session.run(RowFinalTask(model, names, theta, r_eff, cands)):
        out.update({f.ref: f for f in part.finals})
    return out


def _patched(
    parts: Sequence[LooPart], matched: dict[RowRef, MatchedRow], finals: dict[RowRef, RowFinal]
) -> list[LooPart]:
    """`parts` with the rows whose matched values are used replaced (their `HighRow`s, and pointwise values)."""
    out = []
    for p in parts:
        high = []
        elpd_i = None if p.elpd_i is None else p.elpd_i.copy()
        pareto_k = None if p.pareto_k is None else p.pareto_k.copy()
        for h in p.high:
            m = matched[h.ref]
            if m.used:
                h = HighRow(h.ref, m.elpd_after, finals[h.ref].p_loo, m.k_after)
                if elpd_i is not None and pareto_k is not None:
                    elpd_i[h.ref.row] = m.elpd_after
                    pareto_k[h.ref.row] = m.k_after
            high.append(h)
        out.append(replace(p, high=tuple(high), elpd_i=elpd_i, pareto_k=pareto_k))
    return out
