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


def block_cholesky(H: np.ndarray) -> np.ndarray:
    """Lower Cholesky factors of a batch of symmetric blocks (..., e, e); NaN for a block that is not positive
    definite (a proposal built from it is then rejected, not an error)."""
    if H.shape[-1] == 1:
        with np.errstate(invalid="ignore"):
            return np.where(H > 0, np.sqrt(np.maximum(H, 0.0)), np.nan)
    try:
        return np.linalg.cholesky(H)
    except np.linalg.LinAlgError:
        out = np.full(H.shape, np.nan)
        flat, res = H.reshape(-1, *H.shape[-2:]), out.reshape(-1, *H.shape[-2:])
        for k in range(flat.shape[0]):
            try:
                res[k] = np.linalg.cholesky(flat[k])
            except np.linalg.LinAlgError:
                pass
        return out


def newton_proposal(
    x: np.ndarray, g: np.ndarray, L: np.ndarray, xi: np.ndarray, beta: float = 0.0
) -> tuple[np.ndarray, np.ndarray]:
    """A Newton (Laplace-at-the-point) proposal, block by block: with H = L Lᵀ (L (..., e, e) lower), gradient g and
    m = x − H⁻¹g, x' = m + β(x − m) + √(1 − β²) L⁻ᵀξ, i.e. x' ~ N(m + β(x − m), (1 − β²)H⁻¹) (β = 0: the Laplace
    approximation at x; β < 0 over-relaxes, and stays reversible where the target is that Gaussian). x, g, xi
    (..., e). Returns (x', log q(x' | x)) per block up to the constant that cancels in a ratio
    (`newton_log_density`)."""
    m = x - _solve_chol(L, g)
    prop = m + beta * (x - m) + math.sqrt(1.0 - beta * beta) * _solve_upper(L, xi)
    return prop, -0.5 * np.sum(xi * xi, axis=-1) + _log_diag(L)


def newton_log_density(to: np.ndarray, x: np.ndarray, g: np.ndarray, L: np.ndarray, beta: float = 0.0) -> np.ndarray:
    """log q(to | x) of `newton_proposal` per block (H = L Lᵀ, gradient g at x), up to its constant: the reverse
    move's density, with the gradient and curvature at the proposal."""
    m = x - _solve_chol(L, g)
    w = (to - m - beta * (x - m)) / math.sqrt(1.0 - beta * beta)
    u = np.einsum("...ji,...j->...i", L, w) if L.shape[-1] > 1 else L[..., 0] * w  # Lᵀ w
    return -0.5 * np.sum(u * u, axis=-1) + _log_diag(L)


def _log_diag(L: np.ndarray) -> np.ndarray:
    return np.sum(np.log(np.diagonal(L, axis1=-2, axis2=-1)), axis=-1)


def _solve_chol(L: np.ndarray, g: np.ndarray) -> np.ndarray:
    """H⁻¹ g with H = L Lᵀ, batched."""
    if L.shape[-1] == 1:
        return g / (L[..., 0] * L[..., 0])
    H = L @ np.swapaxes(L, -1, -2)
    return np.linalg.solve(H, g[..., None])[..., 0]


def _solve_upper(L: np.ndarray, xi: np.ndarray) -> np.ndarray:
    """L⁻ᵀ ξ, batched."""
    if L.shape[-1] == 1:
        return xi / L[..., 0]
    return np.linalg.solve(np.swapaxes(L, -1, -2), xi[..., None])[..., 0]
