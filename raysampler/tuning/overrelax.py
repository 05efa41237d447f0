"""DG-LMC's over-relaxation α (Adler 1981; Neal 1998; docs/algorithms.md, "DG-LMC over-relaxation") chosen from the
workers' Laplace models: along a few eigendirections, (θ, z_1..z_b) is a linear Gaussian recursion whose
autocorrelation is exact, and the α of `OVERRELAX_GRID` with the smallest worst-case integrated autocorrelation time
of θ and θ² wins. Every α leaves the chain's law unchanged; only its speed depends on the choice."""

from __future__ import annotations

import numpy as np
from scipy.linalg import solve_discrete_lyapunov

#: Candidate over-relaxation parameters for "auto" (0 is plain Gibbs).
OVERRELAX_GRID = tuple(round(-0.05 * k, 2) for k in range(20))


def overrelax_for_laplace_model(
    P: list[np.ndarray], prior_P: np.ndarray, rho: np.ndarray, max_directions: int = 9
) -> float:
    """The α of `OVERRELAX_GRID` that minimises the largest integrated autocorrelation time (IAT) of θ and of θ²
    predicted for over-relaxed DG-LMC under the workers' quadratic models U_i(z) ≈ ½zᵀP_iz (φ coordinates).

    The prediction treats each eigendirection v of Σ_i P_i on its own, with precisions p0 = vᵀP0v and p_i = vᵀP_iv:
    then (θ, z_1..z_b) follow a linear Gaussian recursion whose autocorrelations are exact (`gibbs_iat`). The
    θ² term guards against the oscillation that α near −1 causes where the plain chain already mixes fast. The
    choice only affects speed: every α leaves the chain's law unchanged. Up to `max_directions` directions spread
    over the range of the plain chain's coupling are evaluated.
    """
    rho = np.asarray(rho, dtype=float)
    if P[0].ndim == 2:
        _, V = np.linalg.eigh(sum(P))
        p0 = np.einsum("ij,ik,kj->j", V, prior_P, V)
        p = np.stack([np.einsum("ij,ik,kj->j", V, Pi, V) for Pi in P], axis=1)  # (d, b)
    else:
        p0 = np.diag(prior_P).copy()
        p = np.stack(P, axis=1)
    p0, p = np.clip(p0, 0.0, None), np.clip(p, 0.0, None)
    coupling = np.sum(1.0 / (rho * (1.0 + rho * p)), axis=1) / (p0 + np.sum(1.0 / rho))  # plain lag-1 autocorr.
    order = np.argsort(coupling)
    picks = np.unique(order[np.linspace(0, len(order) - 1, min(max_directions, len(order))).round().astype(int)])
    worst = [max(max(gibbs_iat(a, p0[j], p[j], rho)) for j in picks) for a in OVERRELAX_GRID]
    return float(OVERRELAX_GRID[int(np.argmin(worst))])


def gibbs_iat(alpha: float, p0: float, p: np.ndarray, rho: np.ndarray) -> tuple[float, float]:
    """IAT of θ and of θ² for one direction (`gibbs_autocorrelation`): with θ's autocorrelation Σ_k c_k λ_k^t,
    IAT(θ) = 1 + 2Σ c_k λ_k/(1 − λ_k) and, θ being Gaussian, IAT(θ²) = 1 + 2Σ_{k,l} c_k c_l λ_kλ_l/(1 − λ_kλ_l)."""
    c, lam = gibbs_autocorrelation(alpha, p0, p, rho)
    ll = np.outer(lam, lam)
    iat_x = 1.0 + 2.0 * np.sum(c * lam / (1.0 - lam))
    iat_x2 = 1.0 + 2.0 * np.sum(np.outer(c, c) * ll / (1.0 - ll))
    return float(iat_x.real), float(iat_x2.real)


def gibbs_autocorrelation(alpha: float, p0: float, p: np.ndarray, rho: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """θ's autocorrelation at lag t, Re Σ_k c_k λ_k^t, for one direction of over-relaxed two-block Gibbs on a
    Gaussian Π_ρ: z_i' = β z_i + (1 − β) k_i θ + √(1 − β²) s_i ξ_i (k_i = 1/(1 + ρ_i p_i), s_i² = 1/(p_i + 1/ρ_i)),
    then θ' = α θ + (1 − α) Σ w_i z_i' + √(1 − α²) σ ξ (w_i = σ²/ρ_i, σ² = 1/(p0 + Σ 1/ρ_i)), β = α (means
    dropped). λ are the eigenvalues of this linear recursion; the stationary covariance solves its Lyapunov
    equation. Returns (c, λ)."""
    b = len(p)
    k, s2 = 1.0 / (1.0 + rho * p), 1.0 / (p + 1.0 / rho)
    var = 1.0 / (p0 + np.sum(1.0 / rho))
    w = var / rho
    beta = alpha
    A = np.zeros((b + 1, b + 1))
    A[1:, 1:] = beta * np.eye(b)
    A[1:, 0] = (1.0 - beta) * k
    A[0, 0] = alpha + (1.0 - alpha) * (1.0 - beta) * (w @ k)
    A[0, 1:] = (1.0 - alpha) * beta * w
    nz = (1.0 - beta**2) * s2
    cz = (1.0 - alpha) * w
    G = np.zeros((b + 1, b + 1))
    G[1:, 1:] = np.diag(nz)
    G[0, 1:] = G[1:, 0] = cz * nz
    G[0, 0] = cz @ (nz * cz) + (1.0 - alpha**2) * var
    S = solve_discrete_lyapunov(A, G)
    lam, R = np.linalg.eig(A)
    return R[0, :] * np.linalg.solve(R, S[:, 0]) / S[0, 0], lam
