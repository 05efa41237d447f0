"""Default tuning from a bias budget: the predicted bias of an unadjusted sampler under the Laplace model, and the
largest step (or the smallest ρ) that keeps it within δ.

Comparing the stationary law of the draw a sampler outputs (`laws`) with the Laplace posterior predicts the
sampler's bias: the largest mean shift in posterior sds and the largest relative sd error, over the θ coordinates a
user reads (`compare`). Each algorithm asks for the largest step (or the smallest ρ) whose prediction stays within
its `bias_budget` δ, found by one bisection in log scale (`bisect_log`), and reports the prediction in its
`TuningReport`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from ..models import Model
from ..topology import Topology
from .curvature import lipschitz_bound
from .laplace import Laplace
from .laws import Law, dadmms_law, dsghmc_law, dsgld_law, dula_law, fald_law, pi_rho_moments, qlsd_law, ula_law_moments
from .report import BiasPrediction
from .shards import ShardPool

_UNSTABLE = BiasPrediction(math.inf, math.inf)


class StepChoice(NamedTuple):
    """A full-gradient sampler's step size and how it was chosen: the plain rule's L, or the bias it predicts."""

    step: float
    L: float | None = None
    bias: BiasPrediction | None = None


def gradient_step(
    step_size: float | None,
    preconditioned: bool,
    model: Model,
    pool: ShardPool,
    budgeted: Callable[[], tuple[float, BiasPrediction]],
) -> StepChoice:
    """The step of ULA and QLSD: `step_size` where given; without a preconditioner the plain rule 0.1 / L
    (`lipschitz_bound`); else the largest step whose predicted bias fits the budget (`budgeted`, e.g. `ula_step`)."""
    if step_size is not None:
        return StepChoice(float(step_size))
    if not preconditioned:
        L = lipschitz_bound(model, pool)
        return StepChoice(0.1 / L, L)
    step, bias = budgeted()
    return StepChoice(step, None, bias)


def compare(lap: Laplace, mean: np.ndarray, cov: np.ndarray) -> BiasPrediction:
    """A sampler's stationary (mean, cov) in the Laplace model's coordinates against the Laplace posterior, read in
    θ."""
    mean0, cov0 = lap.posterior()
    L = lap.precond.matrix()
    if L is not None:
        mean, cov, mean0, cov0 = L @ mean, L @ cov @ L.T, L @ mean0, L @ cov0 @ L.T
    sd0 = np.sqrt(np.clip(np.diag(cov0), 1e-300, None))
    sd = np.sqrt(np.clip(np.diag(cov), 0.0, None))
    return BiasPrediction(float(np.max(np.abs(mean - mean0) / sd0)), float(np.max(np.abs(sd / sd0 - 1.0))))


def predict(lap: Laplace, law: Law | None) -> BiasPrediction:
    """The bias of a stationary law (`compare`); infinite where the recursion is unstable (no law)."""
    return _UNSTABLE if law is None else compare(lap, *law)


# --- the bisection ------------------------------------------------------------------------------------------------


def bisect_log(within: Callable[[float], bool], ok: float, bad: float, iters: int) -> float:
    """Bisection in log scale between a value `ok` within the budget and a value `bad` beyond it (either may be the
    larger): `iters` geometric midpoints, returning the last value known within. Deterministic."""
    for _ in range(iters):
        mid = math.sqrt(ok * bad)
        if within(mid):
            ok = mid
        else:
            bad = mid
    return ok


def largest_within_budget(
    bias: Callable[[float], BiasPrediction], delta: float, start: float, iters: int = 14, floor: float = 1e-4
) -> tuple[float, BiasPrediction]:
    """The largest value in (0, start] whose predicted bias is ≤ δ, for a bias that grows with the value: `start` if
    it is within, else `bisect_log` over [floor·start, start] (14 halvings of log: to 0.1 %)."""
    pred = bias(start)
    if pred.worst <= delta:
        return start, pred
    lo = bisect_log(lambda v: bias(v).worst <= delta, start * floor, start, iters)
    return lo, bias(lo)


def smallest_within_budget(
    bias: Callable[[float], BiasPrediction], delta: float, lo: float, hi: float, iters: int = 14
) -> tuple[float, BiasPrediction]:
    """The smallest value in [lo, hi] whose predicted bias is ≤ δ, for a bias that falls as the value grows
    (`bisect_log`); `hi` if even it exceeds δ."""
    if bias(lo).worst <= delta:
        return lo, bias(lo)
    if bias(hi).worst > delta:
        return hi, bias(hi)
    hi = bisect_log(lambda v: bias(v).worst <= delta, hi, lo, iters)
    return hi, bias(hi)


# --- step rules from the Laplace model ----------------------------------------------------------------------------


def ula_step_bound(lap: Laplace) -> float:
    """2/λ_max(Λ): ULA on the Laplace model is stable below it."""
    return 2.0 / float(np.linalg.eigvalsh(lap.precision())[-1]) * 0.999


def mala_initial_step(lap: Laplace) -> float:
    """MALA's starting step h = 1.36·d^{-1/3}/λ_max(Λ) (proposal variance 2h ≈ 1.65² d^{-1/3} on a unit-scale
    target: the optimal-scaling rule), then adapted to the acceptance target during burn-in."""
    d = lap.prior_P.shape[0] if lap.prior_P is not None else 1
    return 1.36 * d ** (-1.0 / 3.0) / float(np.linalg.eigvalsh(lap.precision())[-1])


def ula_bias(lap: Laplace, step: float) -> BiasPrediction:
    """ULA's predicted bias at `step` (`laws.ula_law_moments`)."""
    return predict(lap, ula_law_moments(lap, step))


def ula_step(lap: Laplace, delta: float) -> tuple[float, BiasPrediction]:
    """ULA's largest step within δ."""
    return largest_within_budget(lambda g: ula_bias(lap, g), delta, ula_step_bound(lap))


def dsgld_step(lap: Laplace, W: np.ndarray, delta: float) -> tuple[float, BiasPrediction]:
    """The largest η within δ (x̄ moves like ULA with step η/b, so the search starts from b × ULA's bound)."""
    b = W.shape[0]
    return largest_within_budget(lambda eta: predict(lap, dsgld_law(lap, W, eta)), delta, b * ula_step_bound(lap))


def dsghmc_tuning(
    lap: Laplace, W: np.ndarray, delta: float, step: float | None, friction: float | None
) -> tuple[float, float, BiasPrediction]:
    """Friction: critical damping of the slowest direction of x̄'s dynamics (underdamped Langevin with mass b on U,
    whose slowest frequency is √(λ_min/b)), γ = 2√(λ_min(Λ)/b) — overdamped slows every direction, underdamped
    oscillates; then the largest η within δ."""
    b = W.shape[0]
    lam_min = float(np.linalg.eigvalsh(lap.precision())[0])
    gam = float(friction) if friction is not None else 2.0 * math.sqrt(max(lam_min, 1e-12) / b)
    if step is not None:
        return float(step), gam, predict(lap, dsghmc_law(lap, W, float(step), gam))
    eta, pred = largest_within_budget(
        lambda e: predict(lap, dsghmc_law(lap, W, e, gam)), delta, 2.0 * math.sqrt(b * ula_step_bound(lap))
    )
    return eta, gam, pred


def dula_step(lap: Laplace, top: Topology, beta0: float, delta: float) -> tuple[float, BiasPrediction]:
    """The largest constant α within δ (x̄ moves like ULA with step α)."""
    L = np.asarray(top.laplacian())
    return largest_within_budget(lambda al: predict(lap, dula_law(lap, L, al, beta0)), delta, ula_step_bound(lap))


def dadmms_rho(lap: Laplace, top: Topology, noise: str | None, delta: float) -> tuple[float, BiasPrediction]:
    """The smallest ρ — the fastest mixing: the agents' autocorrelation grows with ρ — whose predicted bias stays
    within δ, and whose effective step is at most a quarter of ULA's within the same budget. Near consensus the
    average takes implicit-Euler steps h = 1/(2ρN) (N = Σ_i n_i). With the curvature noise that step is exact on
    the quadratic model at any h, so the Laplace model alone cannot bound the error the posterior's departure from a
    Gaussian causes; it grows in proportion to h, and on breast_cancer faster than ULA's, so that a quarter of
    ULA's step keeps it within ULA's own (docs/performance.md, "Measurements behind choices in the code"). Hence
    h ≤ γ_ULA(δ)/4: ρ ≥ 2/(Nγ_ULA)."""
    N = float(np.sum([len(n) for n in top.neighbours]))
    lam_max = float(np.linalg.eigvalsh(lap.precision())[-1])
    gamma_ula, _ = ula_step(lap, delta)
    lo, hi = 4.0 / (2.0 * N * gamma_ula), lam_max / (2.0 * N * 1e-3)
    return smallest_within_budget(
        lambda r: predict(lap, dadmms_law(lap, top, r, noise or "curvature")), delta, lo, max(hi, 10.0 * lo)
    )


def qlsd_step(lap: Laplace, om: float, memory: bool, delta: float) -> tuple[float, BiasPrediction]:
    """The largest γ within δ for QLSD with quantiser variance factor ω (`laws.qlsd_law`)."""
    return largest_within_budget(lambda g: predict(lap, qlsd_law(lap, g, om, memory)), delta, ula_step_bound(lap))


def fald_step(lap: Laplace, p_comm: float, tau: float, delta: float) -> tuple[float, BiasPrediction]:
    """The largest client step γ within δ (the average moves like ULA with step γ/b, so the search starts from
    b × ULA's bound)."""
    b = len(lap.quads) if lap.quads else 1
    return largest_within_budget(lambda g: predict(lap, fald_law(lap, g, p_comm, tau)), delta, b * ula_step_bound(lap))


def dglmc_bias(lap: Laplace, rho: float) -> BiasPrediction:
    """π_ρ's predicted bias (`laws.pi_rho_moments`) at a common ρ: the largest |Δmean|/sd and sd inflation."""
    moments = pi_rho_moments(lap)
    mean0, sd0 = moments(0.0)
    mean, sd = moments(rho)
    return BiasPrediction(float(np.max(np.abs(mean - mean0) / sd0)), float(np.max(sd / sd0) - 1.0))


def dglmc_rho(lap: Laplace, delta: float, rho_start: float) -> tuple[float, BiasPrediction]:
    """DG-LMC's largest common ρ ≤ `rho_start` whose π_ρ (`dglmc_bias`) keeps every θ coordinate's mean within δ
    posterior sd of the posterior's and its sd within a factor 1 + δ.

    `rho_start` = ((1 + δ)² − 1)/max_i M_i already bounds the sd inflation in every direction (not only along the
    coordinates); the search (40 halvings of log ρ over [10⁻⁶ρ_start, ρ_start]) only lowers it where the means
    would move too far (shards that disagree). π_ρ only widens the posterior, so its sd error is max sd/sd0 − 1.
    """
    return largest_within_budget(lambda rho: dglmc_bias(lap, rho), delta, rho_start, iters=40, floor=1e-6)
