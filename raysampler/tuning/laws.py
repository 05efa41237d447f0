"""Exact stationary laws of the unadjusted samplers under the shared tuning step's Laplace model.

Under the quadratic (Laplace) model every unadjusted sampler is a linear Gaussian recursion in its full state
s' = F s + c + N(0, Ω) (agents' points, momenta, duals, …), whose stationary law is exact: mean (I − F)⁻¹c and
covariance S = F S Fᵀ + Ω (the discrete Lyapunov equation, `stationary`; the tests' exact laws use the same function).
`budget` compares the law of the draw each sampler outputs with the Laplace posterior to predict its bias.

Agent i's potential with the prior split evenly, V_i = U_i + U_prior/b, is ½zᵀA_iz − a_iᵀz with A_i = P_i + P0/b and
a_i = b0/b − g_i (the quadratics of `Laplace`, in z = φ − centre). Laws whose full state is larger than
`EXACT_MAX_STATE` (many agents and dimensions) replace the agents' Hessians by their mean, Ā = Λ/b ("homogeneous
shards"), which makes the recursion separate along Λ's eigenvectors; the heterogeneous gradients a_i still enter
the mean exactly. These approximations are stated where used. DG-LMC's π_ρ has a closed form (`pi_rho_moments`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import scipy.linalg

from ..topology import Topology
from .laplace import Laplace

#: Largest full-state dimension whose Lyapunov equation is solved directly, the solve's time at this size staying
#: affordable on 2 cores (docs/performance.md, "Measurements behind choices in the code").
EXACT_MAX_STATE = 450

Law = tuple[np.ndarray, np.ndarray]


def stationary(F: np.ndarray, c: np.ndarray, Omega: np.ndarray) -> Law | None:
    """Mean and covariance of the stationary law of s' = F s + c + N(0, Ω); None if the recursion is unstable."""
    if np.max(np.abs(np.linalg.eigvals(F))) >= 1.0 - 1e-12:
        return None
    mean = np.linalg.solve(np.eye(F.shape[0]) - F, c)
    S = scipy.linalg.solve_discrete_lyapunov(F, Omega)
    return mean, 0.5 * (S + S.T)


def agent_quadratics(lap: Laplace) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(A_i, a_i): agent i's potential U_i + U_prior/b as ½zᵀA_iz − a_iᵀz, dense (d, d)."""
    assert lap.quads is not None and lap.prior_P is not None and lap.prior_b is not None
    b = len(lap.quads)
    A = [(np.diag(P) if P.ndim == 1 else P) + lap.prior_P / b for _, P in lap.quads]
    a = [lap.prior_b / b - g for g, _ in lap.quads]
    return A, a


def _block_diag(blocks: Sequence[np.ndarray]) -> np.ndarray:
    return scipy.linalg.block_diag(*blocks)


def _mean_of(F: np.ndarray, c: np.ndarray) -> np.ndarray | None:
    """The stationary mean (I − F)⁻¹c (a linear solve: cheap even where the Lyapunov equation is not)."""
    try:
        return np.linalg.solve(np.eye(F.shape[0]) - F, c)
    except np.linalg.LinAlgError:
        return None


def _average(mean: np.ndarray, cov: np.ndarray, b: int, d: int) -> tuple[np.ndarray, np.ndarray]:
    """Law of the agents' average x̄ = (1/b) Σ_i x_i from the law of the stacked x (and any state after it)."""
    M = np.zeros((d, mean.shape[0]))
    M[:, : b * d] = np.tile(np.eye(d), b) / b
    return M @ mean, M @ cov @ M.T


def _homogeneous_law(lap: Laplace, mean: np.ndarray, var_of: Callable[[np.ndarray], np.ndarray | None]) -> Law | None:
    """A law with exact mean and the covariance of the homogeneous-shards model: per eigenvalue λ of Λ, the
    stationary variance `var_of(λ)` of the draw, recombined as V diag(var) Vᵀ."""
    lam, V = np.linalg.eigh(lap.precision())
    var = var_of(lam)
    if var is None or not np.all(np.isfinite(var)) or np.any(var <= 0):
        return None
    return mean, (V * var) @ V.T


def _large(
    lap: Laplace, F: np.ndarray, c: np.ndarray, b: int, d: int, var_of: Callable[[np.ndarray], np.ndarray | None]
) -> Law | None:
    """For a full state too large for the Lyapunov equation: the exact mean of x̄ with the homogeneous-shards
    covariance `var_of` (see the module doc)."""
    if np.max(np.abs(np.linalg.eigvals(F))) >= 1.0 - 1e-12:
        return None
    mean = _mean_of(F, c)
    if mean is None:
        return None
    return _homogeneous_law(lap, np.mean(mean[: b * d].reshape(b, d), axis=0), var_of)


def _ula_var(lam: np.ndarray, step: float) -> np.ndarray | None:
    """ULA's stationary variance 1/(λ(1 − γλ/2)) per eigenvalue λ (None if unstable)."""
    denom = lam * (1.0 - 0.5 * step * lam)
    return None if np.any(denom <= 0) else 1.0 / denom


def _sghmc_var(lam: np.ndarray, eta: float, gam: float, b: int) -> np.ndarray | None:
    """Stationary variance of x̄ for the averaged D-SGHMC recursion along one direction of curvature λ (of U/b):
    v' = (1 − ηγ)v − ηλx + n, x' = x + ηv', n ~ N(0, 2γη/b) (2×2 Lyapunov per eigenvalue)."""
    out = np.empty_like(lam)
    for k, l in enumerate(lam):
        F = np.array([[1.0 - eta**2 * l, eta * (1.0 - eta * gam)], [-eta * l, 1.0 - eta * gam]])
        Om = (2.0 * gam * eta / b) * np.array([[eta**2, eta], [eta, 1.0]])
        law = stationary(F, np.zeros(2), Om)
        if law is None:
            return None
        out[k] = law[1][0, 0]
    return out


# --- ULA --------------------------------------------------------------------------------------------------------------


def ula_law_moments(lap: Laplace, step: float) -> Law | None:
    """ULA θ ← θ − γ∇U + √(2γ)ξ on the Laplace model: its stationary law is N(posterior mean, S) with
    S = V diag(1/(λ(1 − γλ/2))) Vᵀ (Λ = V diag(λ) Vᵀ); only the covariance is biased."""
    mean0, _ = lap.posterior()
    lam, V = np.linalg.eigh(lap.precision())
    denom = lam * (1.0 - 0.5 * step * lam)
    if np.any(denom <= 0):
        return None
    return mean0, (V / denom) @ V.T


# --- D-SGLD -----------------------------------------------------------------------------------------------------------


def dsgld_law(lap: Laplace, W: np.ndarray, eta: float) -> Law | None:
    """D-SGLD x' = (W ⊗ I − ηA)x + ηa + √(2η)ξ on the stacked agents (A = blockdiag A_i); the draw is x̄."""
    A, a = agent_quadratics(lap)
    b, d = len(A), A[0].shape[0]
    F = np.kron(W, np.eye(d)) - eta * _block_diag(A)
    c = eta * np.concatenate(a)
    if b * d > EXACT_MAX_STATE:  # exact mean; covariance of homogeneous shards (x̄ is ULA with step η/b)
        return _large(lap, F, c, b, d, lambda lam: _ula_var(lam, eta / b))
    law = stationary(F, c, 2.0 * eta * np.eye(b * d))
    return None if law is None else _average(*law, b, d)


# --- D-SGHMC ----------------------------------------------------------------------------------------------------------


def dsghmc_law(lap: Laplace, W: np.ndarray, eta: float, gam: float) -> Law | None:
    """D-SGHMC, state (x, v): v' = (1 − ηγ)v − η(Ax − a) + n, x' = (W ⊗ I)x + ηv', n ~ N(0, 2γη I):
    F = [[W⊗I − η²A, η(1 − ηγ)I], [−ηA, (1 − ηγ)I]], c = (η²a, ηa), Ω = 2γη [[η²I, ηI], [ηI, I]]."""
    A, a = agent_quadratics(lap)
    b, d = len(A), A[0].shape[0]
    n = b * d
    Ab, eye = _block_diag(A), np.eye(n)
    F = np.block(
        [[np.kron(W, np.eye(d)) - eta**2 * Ab, eta * (1 - eta * gam) * eye], [-eta * Ab, (1 - eta * gam) * eye]]
    )
    c = np.concatenate([eta**2 * np.concatenate(a), eta * np.concatenate(a)])
    if 2 * n > EXACT_MAX_STATE:  # exact mean; covariance of the averaged underdamped recursion (mass b)
        return _large(lap, F, c, b, d, lambda lam: _sghmc_var(lam / b, eta, gam, b))
    Om = 2 * gam * eta * np.block([[eta**2 * eye, eta * eye], [eta * eye, eye]])
    law = stationary(F, c, Om)
    return None if law is None else _average(*law, b, d)


# --- D-ULA (constant steps) -------------------------------------------------------------------------------------------


def dula_law(lap: Laplace, L: np.ndarray, alpha: float, beta: float) -> Law | None:
    """D-ULA with constant steps: x' = (I − β L⊗I − αbA)x + αb a + N(0, 2αb I) (L the graph Laplacian)."""
    A, a = agent_quadratics(lap)
    b, d = len(A), A[0].shape[0]
    F = np.eye(b * d) - beta * np.kron(L, np.eye(d)) - alpha * b * _block_diag(A)
    c = alpha * b * np.concatenate(a)
    if b * d > EXACT_MAX_STATE:  # exact mean; covariance of homogeneous shards (x̄ is ULA with step α)
        return _large(lap, F, c, b, d, lambda lam: _ula_var(lam, alpha))
    law = stationary(F, c, 2.0 * alpha * b * np.eye(b * d))
    return None if law is None else _average(*law, b, d)


# --- D-ADMMS ----------------------------------------------------------------------------------------------------------


def dadmms_law(lap: Laplace, top: Topology, rho: float, noise: str) -> Law | None:
    """D-ADMMS on the quadratic model. Agent i's prox step is linear: x_i' = B_i(a_i + v_i/γ_i), B_i = (A_i + I/γ_i)⁻¹,
    γ_i = 1/(2ρn_i), v_i = ½(x_i + mean_{j∈N_i} x_j) − γ_i p_i − s_i, s_i ~ N(0, C_i); the lagged dual is
    p^t = p^{t−1} + ρ(L⊗I)x^t. State (x^t, q^{t−1}) with p = (U⊗I)q, U an orthonormal basis of range(L) (the dual's
    other components stay 0): x' = (BΓ⁻¹H − ρBL)x − BUq + Ba − BΓ⁻¹s, q' = q + ρUᵀL x. Noise C_i: "curvature"
    2γ_iI + γ_i²A_i, "langevin" 2γ_iI, "paper" I/(2ρ²)."""
    A, a = agent_quadratics(lap)
    b, d = len(A), A[0].shape[0]
    nbrs = top.neighbours
    deg = np.array([len(n) for n in nbrs])
    if np.any(deg == 0):
        return None  # isolated agents do not sample (deterministic local MAPs)
    Lg = np.asarray(top.laplacian())
    w, Uf = np.linalg.eigh(Lg)
    U = Uf[:, w > 1e-9]
    gam = 1.0 / (2.0 * rho * deg)
    H = 0.5 * (np.eye(b) + (np.diag(1.0 / deg) @ (np.diag(deg) - Lg)))  # ½(x_i + mean of neighbours)
    B = [np.linalg.inv(Ai + np.eye(d) / gi) for Ai, gi in zip(A, gam)]
    Bb = _block_diag(B)
    Ginv = np.kron(np.diag(1.0 / gam), np.eye(d))
    Lk, Uk = np.kron(Lg, np.eye(d)), np.kron(U, np.eye(d))
    m = Uk.shape[1]
    Fx = Bb @ Ginv @ np.kron(H, np.eye(d)) - rho * Bb @ Lk
    F = np.block([[Fx, -Bb @ Uk], [rho * Uk.T @ Lk, np.eye(m)]])
    c = np.concatenate([Bb @ np.concatenate(a), np.zeros(m)])
    if b * d + m > EXACT_MAX_STATE:
        # exact mean; covariance: near consensus the average takes implicit-Euler Langevin steps h = 1/(2ρN), whose
        # stationary variance with these noises is 1/λ ("curvature"), 1/(λ(1 + hλ/2)) ("langevin")
        N = float(deg.sum())
        h = 1.0 / (2.0 * rho * N)
        scale = {"curvature": 0.0, "langevin": 1.0, "paper": 1.0}[noise]
        paper = (deg.mean() / (2.0 * rho)) if noise == "paper" else 1.0
        return _large(lap, F, c, b, d, lambda lam: paper / (lam * (1.0 + scale * h * lam / 2.0)))
    if noise == "curvature":
        C = [2 * gi * np.eye(d) + gi**2 * Ai for Ai, gi in zip(A, gam)]
    elif noise == "langevin":
        C = [2 * gi * np.eye(d) for gi in gam]
    else:
        C = [np.eye(d) / (2 * rho**2) for _ in gam]
    Nx = Bb @ Ginv
    Om = np.zeros((b * d + m, b * d + m))
    Om[: b * d, : b * d] = Nx @ _block_diag(C) @ Nx.T
    law = stationary(F, c, Om)
    return None if law is None else _average(*law, b, d)


# --- QLSD -------------------------------------------------------------------------------------------------------------


def qlsd_law(lap: Laplace, step: float, om: float, memory: bool) -> Law | None:
    """QLSD as ULA whose gradient carries the quantiser's error: unbiased, of variance ≤ ω‖v‖² per client vector v
    (QSGD), spread evenly over the d coordinates. With memory v = g_i − h_i, h_i tracking g_i's mean, so ‖v‖² is
    g_i's fluctuation tr(P_i S P_i) under the stationary covariance S; without, ‖g_i‖² adds ‖g_i(mean)‖². The extra
    noise γ² σ²/d · I joins ULA's 2γI; S is found by fixed-point iteration."""
    assert lap.quads is not None
    mean0, _ = lap.posterior()
    Lam = lap.precision()
    d = Lam.shape[0]
    F = np.eye(d) - step * Lam
    if np.max(np.abs(np.linalg.eigvals(F))) >= 1.0:
        return None
    Ps = [np.diag(P) if P.ndim == 1 else P for _, P in lap.quads]
    S = np.linalg.inv(Lam)
    for _ in range(50):
        sigma2 = om * sum(float(np.trace(P @ S @ P)) for P in Ps)
        if not memory:
            sigma2 += om * sum(float(np.sum((g + P @ mean0) ** 2)) for (g, _), P in zip(lap.quads, Ps))
        new = scipy.linalg.solve_discrete_lyapunov(F, (2.0 * step + step**2 * sigma2 / d) * np.eye(d))
        if np.allclose(new, S, rtol=1e-10, atol=1e-14):
            S = new
            break
        S = new
    return mean0, 0.5 * (S + S.T)


# --- FALD -------------------------------------------------------------------------------------------------------------


def fald_law(lap: Laplace, gamma: float, p: float, tau: float, tail: float = 1e-8) -> Law | None:
    """FALD's server average at communication times, N ~ Geometric(p) local steps per round. Client i's step is
    x ← (I − γA_i)x + γa_i + noise (prior split /b; common noise share τ). The mean is exact:
    m = (I − E Ā_N)⁻¹ E c̄_N with Ā_N = (1/b)Σ_i B_i^N, c̄_N = (1/b)Σ_i Σ_{k<N} B_i^k γa_i, B_i = I − γA_i — it holds
    the client drift. The covariance is the homogeneous-shards one (A_i → Λ/b): per eigenvalue λ of Λ, with
    β = 1 − γλ/b, the average x̄' = β^N x̄ + … has noise variance (2γ/b)(1 − β^{2N})/(1 − β²) and stationary variance
    E[noise]/(1 − E[β^{2N}]). The FALD* / VR-FALD* control variates change the clients' drift, not the average's law
    under homogeneous shards, so the same law serves them (their mean is predicted conservatively by plain FALD's)."""
    A, a = agent_quadratics(lap)
    b, d = len(A), A[0].shape[0]
    Bs = [np.eye(d) - gamma * Ai for Ai in A]
    if max(np.max(np.abs(np.linalg.eigvals(B))) for B in Bs) >= 1.0:
        return None
    EA, Ec = np.zeros((d, d)), np.zeros(d)
    Bk = [np.eye(d) for _ in Bs]
    G = [np.zeros(d) for _ in Bs]
    n, mass = 0, 0.0
    while True:
        n += 1
        G = [Gi + Bki @ (gamma * ai) for Gi, Bki, ai in zip(G, Bk, a)]
        Bk = [Bki @ B for Bki, B in zip(Bk, Bs)]
        w = p * (1 - p) ** (n - 1)
        EA += w * sum(Bk) / b
        Ec += w * sum(G) / b
        mass += w
        if (1 - p) ** n < tail or n > 100_000:
            break
    mean = np.linalg.solve(np.eye(d) - EA, Ec / mass)

    def var_of(lam: np.ndarray) -> np.ndarray | None:
        beta = 1.0 - gamma * lam / b
        if np.any(np.abs(beta) >= 1.0):
            return None
        b2 = beta**2
        # E over N ~ Geometric(p) of β^{2N} and of (1 − β^{2N}): closed forms of geometric sums
        e_b2n = p * b2 / (1.0 - (1.0 - p) * b2)
        noise = (2.0 * gamma / b) * (1.0 - e_b2n) / (1.0 - b2)
        return noise / (1.0 - e_b2n)

    return _homogeneous_law(lap, mean, var_of)


# --- DG-LMC -------------------------------------------------------------------------------------------------------


def pi_rho_moments(lap: Laplace) -> Callable[[float], Law]:
    """DG-LMC's π_ρ ([DG-LMC] eq. 3) for a common ρ under the shards' quadratic models U_i(z) ≈ g_iᵀz + ½zᵀP_iz (φ):
    ρ ↦ (its mean and sds in θ, up to the shift). π_ρ is Gaussian with precision Λ_ρ = P0 + Σ_i P_i(I + ρP_i)⁻¹ and
    mean Λ_ρ⁻¹(b0 − Σ_i (I + ρP_i)⁻¹g_i) (each local factor convolved with N(0, ρI)); ρ = 0 gives the posterior's."""
    assert lap.quads is not None and lap.prior_P is not None and lap.prior_b is not None
    quads, prior_P, prior_b = lap.quads, lap.prior_P, lap.prior_b
    dense = quads[0][1].ndim == 2
    L = lap.precond.matrix()
    if dense:
        eig = [
            (np.clip(w, 0.0, None), V, V.T @ g) for (w, V), (g, _) in zip((np.linalg.eigh(P) for _, P in quads), quads)
        ]

    def moments(rho: float) -> Law:
        if dense:
            Lam = prior_P + sum((V * (w / (1 + rho * w))) @ V.T for w, V, _ in eig)
            lin = prior_b - sum(V @ (Vg / (1 + rho * w)) for w, V, Vg in eig)
            cov = np.linalg.inv(Lam)
            mean = cov @ lin
        else:
            lam = np.diag(prior_P) + sum(P / (1 + rho * P) for _, P in quads)
            cov = np.diag(1.0 / lam)
            mean = (prior_b - sum(g / (1 + rho * P) for g, P in quads)) / lam
        if L is not None:
            cov, mean = L @ cov @ L.T, L @ mean
        return mean, np.sqrt(np.clip(np.diag(cov), 1e-300, None))

    return moments
