"""A factor's scale matrix M = diag(sd) L (r_g = M η_g) at K points, with its derivatives in the factor's scale
parameters s = (τ = log sd, the partial correlations of L: `contract.cholesky_factor`), and products with it."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..contract import (
    correlation_pairs,
)
from .spec import GroupEffects


@dataclass(frozen=True, eq=False)
class Scale:
    """A factor's M = diag(sd) L at K points (K, q, q) (r_g = M η_g) and, as asked, its derivatives in the factor's
    scale parameters s = (τ, y): dM (K, q, q, n_s) and d2M (K, q, q, n_s, n_s)."""

    M: np.ndarray
    sd: np.ndarray  # (K, q)
    diagonal: bool
    dM: np.ndarray = field(default_factory=lambda: np.empty(0))  # (empty below order 1)
    d2M: np.ndarray = field(default_factory=lambda: np.empty(0))  # (empty below order 2)


def scale_at(ge: GroupEffects, s: np.ndarray, order: int) -> Scale:
    """M_f and its derivatives (up to `order`) from the factor's scale coordinates s (K, n_s) of θ."""
    K, q = s.shape[0], len(ge.effects)
    with np.errstate(over="ignore"):
        sd = np.exp(s[:, :q])
    ns = ge.n_scale
    eye = np.arange(q)
    if not ge.correlated:
        M = np.zeros((K, q, q))
        M[:, eye, eye] = sd
        dM = d2M = np.empty(0)
        if order >= 1:
            dM = np.zeros((K, q, q, q))
            dM[:, eye, eye, eye] = sd
        if order >= 2:
            d2M = np.zeros((K, q, q, q, q))
            d2M[:, eye, eye, eye, eye] = sd
        return Scale(M, sd, True, dM, d2M)
    L, dL, d2L = cholesky_jet(s[:, q:], q, order)
    M = sd[:, :, None] * L
    dM = d2M = np.empty(0)
    if order >= 1:
        assert dL is not None
        dM = np.zeros((K, q, q, ns))
        dM[:, eye, :, eye] = np.moveaxis(M, 1, 0)  # ∂M/∂τ_i: row i of M
        dM[..., q:] = sd[:, :, None, None] * dL
    if order >= 2:
        assert dL is not None and d2L is not None
        d2M = np.zeros((K, q, q, ns, ns))
        d2M[:, eye, :, eye, eye] = np.moveaxis(M, 1, 0)
        rows = sd[:, :, None, None] * dL  # ∂²M/∂τ_i∂y_k: row i of sd ⊙ ∂L/∂y_k
        for i in range(q):
            d2M[:, i, :, i, q:] = rows[:, i]
            d2M[:, i, :, q:, i] = rows[:, i]
        d2M[..., q:, q:] = sd[:, :, None, None, None] * d2L
    return Scale(M, sd, False, dM, d2M)


def cholesky_jet(y: np.ndarray, q: int, order: int) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    """`contract.cholesky_factor` L (K, q, q) with its first (K, q, q, c) and second (K, q, q, c, c) derivatives in
    y. Row b of L depends on the row's own partial correlations z_j = tanh(y_(j,b)), j < b, in closed form:
    L[b, j] = z_j P_j and L[b, b] = P_b with P_j = Π_{k<j} sech(y_k), so ∂P_j/∂y_m = −z_m P_j (m < j)."""
    K, c = y.shape
    where = {pair: k for k, pair in enumerate(correlation_pairs(q))}
    t = np.tanh(y)
    sech2 = 1.0 - t * t
    sech = np.sqrt(sech2)
    L = np.zeros((K, q, q))
    dL = np.zeros((K, q, q, c)) if order >= 1 else None
    d2L = np.zeros((K, q, q, c, c)) if order >= 2 else None
    L[:, 0, 0] = 1.0
    for b in range(1, q):
        ks = [where[(j, b)] for j in range(b)]
        P = np.ones(K)
        for j in range(b + 1):
            own = j < b
            val = t[:, ks[j]] * P if own else P
            L[:, b, j] = val
            if dL is not None:
                for m in range(j):
                    dL[:, b, j, ks[m]] = -t[:, ks[m]] * val
                if own:
                    dL[:, b, j, ks[j]] = sech2[:, ks[j]] * P
            if d2L is not None:
                for m in range(j):
                    for m2 in range(j):
                        coef = 2.0 * t[:, ks[m]] ** 2 - 1.0 if m == m2 else t[:, ks[m]] * t[:, ks[m2]]
                        d2L[:, b, j, ks[m], ks[m2]] = coef * val
                if own:
                    d2L[:, b, j, ks[j], ks[j]] = -2.0 * t[:, ks[j]] * sech2[:, ks[j]] * P
                    for m in range(j):
                        v = -t[:, ks[m]] * sech2[:, ks[j]] * P
                        d2L[:, b, j, ks[j], ks[m]] = v
                        d2L[:, b, j, ks[m], ks[j]] = v
            if own:
                P = P * sech[:, ks[j]]
    return L, dL, d2L


def apply_scale_many(M: np.ndarray, P: np.ndarray) -> np.ndarray:
    """Mᵀ P_g for every chain and group: M (K, q, q), P (K, G, q, c) → (K, G, q, c)."""
    if M.shape[1] == 1:
        return M[:, 0, 0][:, None, None, None] * P
    # a stacked matmul, faster than einsum here (docs/performance.md, "Measurements behind choices in the code")
    return np.swapaxes(M, 1, 2)[:, None] @ P


def apply_scale(M: np.ndarray, e: np.ndarray, transpose: bool = False) -> np.ndarray:
    """M e_g (or Mᵀ e_g) for every chain and group: M (K, q, q), e (K, G, q) → (K, G, q)."""
    if M.shape[1] == 1:
        return M[:, :, 0][:, None, :] * e
    # a stacked matmul, faster than einsum (docs/performance.md, "Measurements behind choices in the code")
    return ((np.swapaxes(M, 1, 2) if transpose else M)[:, None] @ e[..., None])[..., 0]
