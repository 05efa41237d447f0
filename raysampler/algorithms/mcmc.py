"""Metropolis–Hastings pieces shared by the adjusted kernels: the accept step, the MALA proposal ratio, and dual
averaging of a step size towards an acceptance target (Hoffman & Gelman 2014, Alg. 5)."""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np


class DualAveraging(NamedTuple):
    """Dual-averaging state: updates so far, running acceptance gap H̄, averaged log step size log h̄."""

    count: int  # type: ignore[assignment]  # the field shadows tuple.count, which nothing here calls
    hbar: float
    log_hbar: float

    @classmethod
    def start(cls, log_h0: Any) -> DualAveraging:
        """A fresh state at log step size `log_h0` (a float, or one per chain (K,))."""
        return cls(0, 0.0, log_h0)


def dual_averaging(
    state: DualAveraging,
    accept: float,
    target: float,
    log_h0: float,
    gamma: float = 0.05,
    t0: float = 10.0,
    kappa: float = 0.75,
) -> tuple[float, DualAveraging]:
    """One update of the log step size from the last acceptance probability: (log h to use next, new state).
    After adaptation, use exp(state.log_hbar)."""
    m = state.count + 1
    hbar = (1.0 - 1.0 / (m + t0)) * state.hbar + (target - accept) / (m + t0)
    log_h = math.log(10.0) + log_h0 - math.sqrt(m) / gamma * hbar
    w = m ** (-kappa)
    return log_h, DualAveraging(m, hbar, w * log_h + (1.0 - w) * state.log_hbar)


def mh_accept(log_alpha: np.ndarray, log_u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Accept where log u < log α (non-finite log α is a rejection): (accepted (K,) bool, α = min(1, e^{log α}))."""
    log_alpha = np.where(np.isfinite(log_alpha), log_alpha, -np.inf)
    return log_u < log_alpha, np.exp(np.minimum(log_alpha, 0.0))


def mala_log_ratio(
    x: np.ndarray, grad_x: np.ndarray, prop: np.ndarray, grad_prop: np.ndarray, h: float | np.ndarray
) -> np.ndarray:
    """log q(x | x') − log q(x' | x) for the MALA proposal x' = x − h∇V(x) + √(2h)ξ, q(a | b) ∝
    exp(−‖a − b + h∇V(b)‖²/(4h)): the reverse density uses the gradient at the proposal. Per row (K,); h is one
    step for all rows or one per row (K,)."""
    hh = np.asarray(h, dtype=np.float64)  # a scalar, or one step per chain (K,)
    hc = hh[:, None] if hh.ndim == 1 else hh
    fwd = prop - x + hc * grad_x
    bwd = x - prop + hc * grad_prop
    return (np.sum(fwd * fwd, axis=1) - np.sum(bwd * bwd, axis=1)) / (4.0 * hh)
