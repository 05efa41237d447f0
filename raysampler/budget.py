"""Default tuning from a bias budget: the predicted bias of an unadjusted sampler under the Laplace model, and the
largest step that keeps it within δ.

Under the shared tuning step's quadratic (Laplace) model every unadjusted sampler is a linear Gaussian recursion in
its full state s' = F s + c + N(0, Ω) (agents' points, momenta, duals, …), whose stationary law is exact: mean
(I − F)⁻¹c and covariance S = F S Fᵀ + Ω (the discrete Lyapunov equation). Comparing the law of the draw it outputs
with the Laplace posterior predicts the sampler's bias: the largest mean shift in posterior sds and the largest
relative sd error, over the θ coordinates a user reads. Each algorithm asks for the largest step (or the smallest
ρ) whose prediction stays within its `bias_budget` δ and reports the prediction in its plan.

Agent i's potential with the prior split evenly, V_i = U_i + U_prior/b, is ½zᵀA_iz − a_iᵀz with A_i = P_i + P0/b and
a_i = b0/b − g_i (the quadratics of `Laplace`, in z = φ − centre). Laws whose full state is larger than
`EXACT_MAX_STATE` (many agents and dimensions) replace the agents' Hessians by their mean, Ā = Λ/b ("homogeneous
shards"), which makes the recursion separate along Λ's eigenvectors; the heterogeneous gradients a_i still enter
the mean exactly. These approximations are stated where used.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import scipy.linalg

from .topology import Topology
from .tuning import Laplace

#: Largest full-state dimension whose Lyapunov equation is solved directly (≈ 0.5 s at this size on 2 cores).
EXACT_MAX_STATE = 450


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
    """A sampler's stationary (mean, cov) in the Laplace model's coordinates against the Laplace posterior, read in
    θ."""
    mean0, cov0 = lap.posterior()
    L = lap.precond.matrix()
    if L is not None:
        mean, cov, mean0, cov0 = L @ mean, L @ cov @ L.T, L @ mean0, L @ cov0 @ L.T
    sd0 = np.sqrt(np.clip(np.diag(cov0), 1e-300, None))
    sd = np.sqrt(np.clip(np.diag(cov), 0.0, None))
    return BiasPrediction(float(np.max(np.abs(mean - mean0) / sd0)), float(np.max(np.abs(sd / sd0 - 1.0))))


def largest_within_budget(
    bias: Callable[[float], BiasPrediction], delta: float, start: float, iters: int = 14
) -> tuple[float, BiasPrediction]:
    """The largest step in (0, start] whose predicted bias is ≤ δ (bisection in log scale over [start/10⁴, start],
    to 0.1 %; deterministic)."""
    pred = bias(start)
    if pred.worst <= delta:
        return start, pred
    lo, hi = start * 1e-4, start
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


def ula_law_moments(lap: Laplace, step: float) -> tuple[np.ndarray, np.ndarray] | None:
    """ULA θ ← θ − γ∇U + √(2γ)ξ on the Laplace model: its stationary law is N(posterior mean, S) with
    S = V diag(1/(λ(1 − γλ/2))) Vᵀ (Λ = V diag(λ) Vᵀ); only the covariance is biased."""
    mean0, _ = lap.posterior()
    lam, V = np.linalg.eigh(laplace_precision(lap))
    denom = lam * (1.0 - 0.5 * step * lam)
    if np.any(denom <= 0):
        return None
    return mean0, (V / denom) @ V.T


def ula_bias(lap: Laplace, step: float) -> BiasPrediction:
    """ULA's predicted bias at `step` (`ula_law_moments`)."""
    law = ula_law_moments(lap, step)
    return BiasPrediction(math.inf, math.inf) if law is None else compare(lap, *law)


def mala_initial_step(lap: Laplace) -> float:
    """MALA's starting step h = 1.36·d^{-1/3}/λ_max(Λ) (proposal variance 2h ≈ 1.65² d^{-1/3} on a unit-scale
    target: the optimal-scaling rule), then adapted to the acceptance target during burn-in."""
    d = lap.prior_P.shape[0] if lap.prior_P is not None else 1
    return 1.36 * d ** (-1.0 / 3.0) / float(np.linalg.eigvalsh(laplace_precision(lap))[-1])


def smallest_within_budget(
    bias: Callable[[float], BiasPrediction], delta: float, lo: float, hi: float, iters: int = 14
) -> tuple[float, BiasPrediction]:
    """The smallest value in [lo, hi] whose predicted bias is ≤ δ, for a bias that falls as the value grows
    (bisection in log scale); `hi` if even it exceeds δ."""
    if bias(lo).worst <= delta:
        return lo, bias(lo)
    if bias(hi).worst > delta:
        return hi, bias(hi)
    for _ in range(iters):
        mid = math.sqrt(lo * hi)
        if bias(mid).worst <= delta:
            hi = mid
        else:
            lo = mid
    return hi, bias(hi)


def stationary(F: np.ndarray, c: np.ndarray, Omega: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
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


_UNSTABLE = BiasPrediction(math.inf, math.inf)


def _homogeneous_law(
    lap: Laplace, mean: np.ndarray, var_of: Callable[[np.ndarray], np.ndarray | None]
) -> tuple[np.ndarray, np.ndarray] | None:
    """A law with exact mean and the covariance of the homogeneous-shards model: per eigenvalue λ of Λ, the
    stationary variance `var_of(λ)` of the draw, recombined as V diag(var) Vᵀ."""
    lam, V = np.linalg.eigh(laplace_precision(lap))
    var = var_of(lam)
    if var is None or not np.all(np.isfinite(var)) or np.any(var <= 0):
        return None
    return mean, (V * var) @ V.T


# --- D-SGLD -------------------------------------------------------------------------------------------------------


def dsgld_law(lap: Laplace, W: np.ndarray, eta: float) -> tuple[np.ndarray, np.ndarray] | None:
    """D-SGLD x' = (W ⊗ I − ηA)x + ηa + √(2η)ξ on the stacked agents (A = blockdiag A_i); the draw is x̄."""
    A, a = agent_quadratics(lap)
    b, d = len(A), A[0].shape[0]
    F = np.kron(W, np.eye(d)) - eta * _block_diag(A)
    c = eta * np.concatenate(a)
    if b * d > EXACT_MAX_STATE:  # exact mean; covariance of homogeneous shards (x̄ is ULA with step η/b)
        return _large(lap, F, c, b, d, lambda lam: _ula_var(lam, eta / b))
    law = stationary(F, c, 2.0 * eta * np.eye(b * d))
    return None if law is None else _average(*law, b, d)


def dsgld_step(lap: Laplace, W: np.ndarray, delta: float) -> tuple[float, BiasPrediction]:
    """The largest η within δ (x̄ moves like ULA with step η/b, so the search starts from b × ULA's bound)."""
    b = W.shape[0]
    return largest_within_budget(lambda eta: _predict(lap, dsgld_law(lap, W, eta)), delta, b * ula_step_bound(lap))


# --- D-SGHMC ------------------------------------------------------------------------------------------------------


def dsghmc_law(lap: Laplace, W: np.ndarray, eta: float, gam: float) -> tuple[np.ndarray, np.ndarray] | None:
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


def dsghmc_tuning(
    lap: Laplace, W: np.ndarray, delta: float, step: float | None, friction: float | None
) -> tuple[float, float, BiasPrediction]:
    """Friction: critical damping of the slowest direction of x̄'s dynamics (underdamped Langevin with mass b on U,
    whose slowest frequency is √(λ_min/b)), γ = 2√(λ_min(Λ)/b) — overdamped slows every direction, underdamped
    oscillates; then the largest η within δ."""
    b = W.shape[0]
    lam_min = float(np.linalg.eigvalsh(laplace_precision(lap))[0])
    gam = float(friction) if friction is not None else 2.0 * math.sqrt(max(lam_min, 1e-12) / b)
    if step is not None:
        return float(step), gam, _predict(lap, dsghmc_law(lap, W, float(step), gam))
    eta, pred = largest_within_budget(
        lambda e: _predict(lap, dsghmc_law(lap, W, e, gam)), delta, 2.0 * math.sqrt(b * ula_step_bound(lap))
    )
    return eta, gam, pred


# --- D-ULA (constant steps) ---------------------------------------------------------------------------------------


def dula_law(lap: Laplace, L: np.ndarray, alpha: float, beta: float) -> tuple[np.ndarray, np.ndarray] | None:
    """D-ULA with constant steps: x' = (I − β L⊗I − αbA)x + αb a + N(0, 2αb I) (L the graph Laplacian)."""
    A, a = agent_quadratics(lap)
    b, d = len(A), A[0].shape[0]
    F = np.eye(b * d) - beta * np.kron(L, np.eye(d)) - alpha * b * _block_diag(A)
    c = alpha * b * np.concatenate(a)
    if b * d > EXACT_MAX_STATE:  # exact mean; covariance of homogeneous shards (x̄ is ULA with step α)
        return _large(lap, F, c, b, d, lambda lam: _ula_var(lam, alpha))
    law = stationary(F, c, 2.0 * alpha * b * np.eye(b * d))
    return None if law is None else _average(*law, b, d)


def dula_step(lap: Laplace, top: Topology, beta0: float, delta: float) -> tuple[float, BiasPrediction]:
    """The largest constant α within δ (x̄ moves like ULA with step α)."""
    L = np.asarray(top.laplacian())
    return largest_within_budget(lambda al: _predict(lap, dula_law(lap, L, al, beta0)), delta, ula_step_bound(lap))


# --- D-ADMMS ------------------------------------------------------------------------------------------------------


def dadmms_law(lap: Laplace, top: Topology, rho: float, noise: str) -> tuple[np.ndarray, np.ndarray] | None:
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


def dadmms_rho(lap: Laplace, top: Topology, noise: str | None, delta: float) -> tuple[float, BiasPrediction]:
    """The smallest ρ — the fastest mixing: the agents' autocorrelation grows with ρ — whose predicted bias stays
    within δ, and whose effective step is at most a quarter of ULA's within the same budget. Near consensus the
    average takes implicit-Euler steps h = 1/(2ρN) (N = Σ_i n_i). With the curvature noise that step is exact on
    the quadratic model at any h, so the Laplace model alone cannot bound the error the posterior's departure from a
    Gaussian causes; it grows in proportion to h, about four times as fast as ULA's. Measured on breast_cancer
    (b = 4, complete graph; mean over the 31 coordinates of |Δmean|/sd, ESS > 600): 0.113 at h = γ_ULA(δ), 0.071
    at γ_ULA/2, 0.048 at γ_ULA/4, against ULA's 0.07 at γ_ULA. Hence h ≤ γ_ULA(δ)/4: ρ ≥ 2/(Nγ_ULA)."""
    N = float(np.sum([len(n) for n in top.neighbours]))
    lam_max = float(np.linalg.eigvalsh(laplace_precision(lap))[-1])
    gamma_ula, _ = largest_within_budget(lambda g: ula_bias(lap, g), delta, ula_step_bound(lap))
    lo, hi = 4.0 / (2.0 * N * gamma_ula), lam_max / (2.0 * N * 1e-3)
    return smallest_within_budget(
        lambda r: _predict(lap, dadmms_law(lap, top, r, noise or "curvature")), delta, lo, max(hi, 10.0 * lo)
    )


# --- QLSD ---------------------------------------------------------------------------------------------------------


def qlsd_law(lap: Laplace, step: float, om: float, memory: bool) -> tuple[np.ndarray, np.ndarray] | None:
    """QLSD as ULA whose gradient carries the quantiser's error: unbiased, of variance ≤ ω‖v‖² per client vector v
    (QSGD), spread evenly over the d coordinates. With memory v = g_i − h_i, h_i tracking g_i's mean, so ‖v‖² is
    g_i's fluctuation tr(P_i S P_i) under the stationary covariance S; without, ‖g_i‖² adds ‖g_i(mean)‖². The extra
    noise γ² σ²/d · I joins ULA's 2γI; S is found by fixed-point iteration."""
    assert lap.quads is not None
    mean0, _ = lap.posterior()
    Lam = laplace_precision(lap)
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


def qlsd_step(lap: Laplace, om: float, memory: bool, delta: float) -> tuple[float, BiasPrediction]:
    return largest_within_budget(lambda g: _predict(lap, qlsd_law(lap, g, om, memory)), delta, ula_step_bound(lap))


# --- FALD ---------------------------------------------------------------------------------------------------------


def fald_law(
    lap: Laplace, gamma: float, p: float, tau: float, tail: float = 1e-8
) -> tuple[np.ndarray, np.ndarray] | None:
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


def fald_step(
    lap: Laplace, p_comm: float, tau: float, variant: str, q: float, delta: float
) -> tuple[float, BiasPrediction]:
    """The largest client step γ within δ (the average moves like ULA with step γ/b, so the search starts from
    b × ULA's bound)."""
    b = len(lap.quads) if lap.quads else 1
    return largest_within_budget(lambda g: _predict(lap, fald_law(lap, g, p_comm, tau)), delta, b * ula_step_bound(lap))


# --- helpers -------------------------------------------------------------------------------------------------------


def _predict(lap: Laplace, law: tuple[np.ndarray, np.ndarray] | None) -> BiasPrediction:
    return _UNSTABLE if law is None else compare(lap, *law)


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


def _large(
    lap: Laplace, F: np.ndarray, c: np.ndarray, b: int, d: int, var_of: Callable[[np.ndarray], np.ndarray | None]
) -> tuple[np.ndarray, np.ndarray] | None:
    """For a full state too large for the Lyapunov equation: the exact mean of x̄ with the homogeneous-shards
    covariance `var_of` (see the module doc)."""
    if np.max(np.abs(np.linalg.eigvals(F))) >= 1.0 - 1e-12:
        return None
    mean = _mean_of(F, c)
    if mean is None:
        return None
    return _homogeneous_law(lap, np.mean(mean[: b * d].reshape(b, d), axis=0), var_of)
