"""Default tuning from a bias budget: the predicted bias of an unadjusted sampler under the Laplace model, and the
largest step that keeps it within δ.

Under the shared tuning step's quadratic (Laplace) model every unadjusted sampler is a linear Gaussian recursion
whose stationary law is exact (`raysampler.laws`); comparing it with the Laplace posterior predicts the sampler's
discretisation bias: the largest mean shift in posterior sds and the largest relative sd error, over the θ
coordinates a user reads. Each algorithm asks for the largest step (or the smallest ρ) whose prediction stays
within its `bias_budget` δ and reports the prediction in its plan.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from .tuning import Laplace


@dataclass(frozen=True)
class BiasPrediction:
    """Predicted stationary bias against the Laplace posterior: max |Δmean|/sd and max |sd ratio − 1| over θ."""

    mean_shift_sd: float
    sd_error: float

    @property
    def worst(self) -> float:
        return max(self.mean_shift_sd, self.sd_error)

    def as_info(self) -> dict[str, float]:
        return {"predicted_mean_shift_sd": self.mean_shift_sd, "predicted_sd_error": self.sd_error}


def compare(lap: Laplace, mean: np.ndarray, cov: np.ndarray) -> BiasPrediction:
    """A sampler's stationary (mean, cov) in the Laplace model's coordinates against the Laplace posterior, read in θ."""
    mean0, cov0 = lap.posterior()
    L = lap.precond.matrix()
    if L is not None:
        mean, cov, mean0, cov0 = L @ mean, L @ cov @ L.T, L @ mean0, L @ cov0 @ L.T
    sd0 = np.sqrt(np.clip(np.diag(cov0), 1e-300, None))
    sd = np.sqrt(np.clip(np.diag(cov), 0.0, None))
    return BiasPrediction(float(np.max(np.abs(mean - mean0) / sd0)), float(np.max(np.abs(sd / sd0 - 1.0))))


def largest_within_budget(bias: Callable[[float], BiasPrediction], delta: float, start: float,
                          iters: int = 30) -> tuple[float, BiasPrediction]:
    """The largest step in (0, start] whose predicted bias is ≤ δ (bisection in log scale; deterministic)."""
    pred = bias(start)
    if pred.worst <= delta:
        return start, pred
    lo, hi = start * 1e-8, start
    for _ in range(iters):
        mid = math.sqrt(lo * hi)
        if bias(mid).worst <= delta:
            lo = mid
        else:
            hi = mid
    return lo, bias(lo)


def laplace_precision(lap: Laplace) -> np.ndarray:
    """Λ = prior_P + Σ_i P_i: the Laplace posterior's precision in the sampler's coordinates."""
    assert lap.quads is not None and lap.prior_P is not None
    return lap.prior_P + sum(np.diag(P) if P.ndim == 1 else P for _, P in lap.quads)


def ula_step_bound(lap: Laplace) -> float:
    """2/λ_max(Λ): ULA on the Laplace model is stable below it."""
    return 2.0 / float(np.linalg.eigvalsh(laplace_precision(lap))[-1]) * 0.999


def ula_bias(lap: Laplace, step: float) -> BiasPrediction:
    """ULA θ ← θ − γ∇U + √(2γ)ξ on the Laplace model: its stationary law is N(posterior mean, S) with
    S = V diag(1/(λ(1 − γλ/2))) Vᵀ (Λ = V diag(λ) Vᵀ); only the covariance is biased."""
    mean0, _ = lap.posterior()
    lam, V = np.linalg.eigh(laplace_precision(lap))
    denom = lam * (1.0 - 0.5 * step * lam)
    if np.any(denom <= 0):
        return BiasPrediction(math.inf, math.inf)
    return compare(lap, mean0, (V / denom) @ V.T)


def mala_initial_step(lap: Laplace) -> float:
    """MALA's starting step h = 1.36·d^{-1/3}/λ_max(Λ) (proposal variance 2h ≈ 1.65² d^{-1/3} on a unit-scale
    target: the optimal-scaling rule), then adapted to the acceptance target during burn-in."""
    d = lap.prior_P.shape[0] if lap.prior_P is not None else 1
    return 1.36 * d ** (-1.0 / 3.0) / float(np.linalg.eigvalsh(laplace_precision(lap))[-1])


# --- interim rules from the averaged dynamics (each agent average / server average follows ULA on U with an
# effective step); replaced by the exact laws of each recursion ------------------------------------------------

def _ula_equivalent(lap: Laplace, delta: float) -> tuple[float, BiasPrediction]:
    return largest_within_budget(lambda g: ula_bias(lap, g), delta, ula_step_bound(lap))


def dsgld_step(lap: Laplace, W: np.ndarray, delta: float) -> tuple[float, BiasPrediction]:
    """D-SGLD: x̄ follows ULA with step η/b."""
    b = W.shape[0]
    g, pred = _ula_equivalent(lap, delta)
    return b * g, pred


def dsghmc_tuning(lap: Laplace, W: np.ndarray, delta: float, step: float | None,
                  friction: float | None) -> tuple[float, float, BiasPrediction]:
    """D-SGHMC: friction 1 in whitened units, η² ≈ b·γ (x̄ is underdamped Langevin with mass b)."""
    b = W.shape[0]
    g, pred = _ula_equivalent(lap, delta)
    return (float(step) if step is not None else math.sqrt(b * g)), (float(friction) if friction else 1.0), pred


def dula_step(lap: Laplace, top: object, beta0: float, delta: float) -> tuple[float, BiasPrediction]:
    """D-ULA (constant steps): x̄ follows ULA with step α."""
    return _ula_equivalent(lap, delta)


def dadmms_rho(lap: Laplace, top: object, noise: str | None, delta: float) -> tuple[float, BiasPrediction]:
    """D-ADMMS: near consensus the average takes implicit-Euler Langevin steps h = 1/(2ρN), N = Σ_i n_i."""
    degrees = np.asarray(getattr(top, "degrees"))
    N = max(int(degrees.sum()), 1)
    g, pred = _ula_equivalent(lap, delta)
    return 1.0 / (2.0 * N * g), pred


def qlsd_step(lap: Laplace, om: float, memory: bool, delta: float) -> tuple[float, BiasPrediction]:
    """QLSD: ULA with the quantiser's variance ω on top of each gradient: step shrunk by 1 + ω."""
    g, pred = _ula_equivalent(lap, delta)
    return g / (1.0 + om), pred


def fald_step(lap: Laplace, p_comm: float, tau: float, variant: str, q: float,
              delta: float) -> tuple[float, BiasPrediction]:
    """FALD: the server average follows ULA with step γ/b; local steps between communications add drift."""
    b = len(lap.quads or [0])
    g, pred = _ula_equivalent(lap, delta)
    return b * g * p_comm, pred
