"""Distributed tuning oracles: MAP, Laplace preconditioner and local curvature, with no data leaving a worker.

Each quantity is a sum over shards of something a worker computes from its own shard (value,
gradient, Hessian, Hessian-vector products); the coordinator only adds the Gaussian prior and sums.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.linalg
import scipy.optimize

from .algorithms.base import ShardPool
from .models.base import Model

#: Above this dimension the Laplace preconditioner is diagonal (a dense d×d factor costs d² per step).
DENSE_PRECONDITIONER_MAX_DIM = 300


# --- worker-side functions (run where the shard lives; module-level so Ray can ship them) ---------

def shard_value_and_grad(model: Model, X: np.ndarray, y: np.ndarray, theta: np.ndarray):
    u, g = model.potential_and_grad(X, y, theta[None, :])
    return float(u[0]), g[0]


def shard_hessian(model: Model, X: np.ndarray, y: np.ndarray, theta: np.ndarray) -> np.ndarray:
    return model.hessian(X, y, theta)


def shard_hessian_diag(model: Model, X: np.ndarray, y: np.ndarray, theta: np.ndarray) -> np.ndarray:
    return model.hessian_diag(X, y, theta)


def shard_smoothness(model: Model, X: np.ndarray, y: np.ndarray) -> float:
    return float(model.smoothness(X, y))


def shard_whitened_curvature(model: Model, X: np.ndarray, y: np.ndarray, theta: np.ndarray,
                             scale: np.ndarray | None, iters: int = 100, tol: float = 1e-4) -> float:
    """λ_max(Lᵀ ∇²U_i(θ) L) by power iteration on Hessian-vector products: the curvature actually met at θ."""
    d = theta.shape[0]
    v = np.ones(d) + 0.1 * np.sin(np.arange(1, d + 1))  # fixed start: deterministic on every executor
    v /= np.linalg.norm(v)
    lam = 0.0
    for _ in range(iters):
        w = _apply_scale_t(scale, model.hvp(X, y, theta[None, :], _apply_scale(scale, v)[None, :])[0])
        new = float(np.linalg.norm(w))
        if new == 0.0 or not np.isfinite(new):
            return max(new, 0.0) if np.isfinite(new) else float("inf")
        v = w / new
        if abs(new - lam) <= tol * new:
            return new
        lam = new
    return lam


def shard_local_quadratic(model: Model, X: np.ndarray, y: np.ndarray, theta: np.ndarray,
                          scale: np.ndarray | None, dense: bool) -> tuple[np.ndarray, np.ndarray]:
    """Worker i's quadratic model of U_i at θ in φ coordinates: (Lᵀ∇U_i(θ), LᵀH_iL), the Hessian dense (d, d) or
    its diagonal (d,) (a PSD curvature estimate)."""
    _, g = model.potential_and_grad(X, y, theta[None, :])
    g = _apply_scale_t(scale, g[0])
    if dense:
        H = model.hessian(X, y, theta)
        if scale is not None:
            S = np.diag(scale) if scale.ndim == 1 else scale
            H = S.T @ H @ S
        return g, 0.5 * (H + H.T)
    hd = np.asarray(model.hessian_diag(X, y, theta))
    if scale is not None:
        hd = hd * (scale * scale if scale.ndim == 1 else np.sum(scale * scale, axis=0))
    return g, hd


def _apply_scale(scale: np.ndarray | None, v: np.ndarray) -> np.ndarray:
    if scale is None:
        return v
    return v * scale if scale.ndim == 1 else scale @ v


def _apply_scale_t(scale: np.ndarray | None, v: np.ndarray) -> np.ndarray:
    if scale is None:
        return v
    return v * scale if scale.ndim == 1 else scale.T @ v


# --- coordinator side ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Preconditioner:
    """Affine change of variables θ = shift + L φ (L dense (d, d), diagonal (d,), or None for identity).

    With L Lᵀ the inverse Laplace Hessian at the MAP, the posterior in φ is close to N(0, I).
    """

    shift: np.ndarray
    scale: np.ndarray | None
    kind: str  # "laplace" | "diag" | "none"

    def to_theta(self, phi: np.ndarray) -> np.ndarray:
        """θ = shift + L φ for a (K, d) batch."""
        if self.scale is None:
            return phi + self.shift
        return self.shift + (phi * self.scale if self.scale.ndim == 1 else phi @ self.scale.T)

    def to_phi(self, theta: np.ndarray) -> np.ndarray:
        """φ = L⁻¹(θ − shift) for a (K, d) batch."""
        diff = theta - self.shift
        if self.scale is None:
            return diff
        if self.scale.ndim == 1:
            return diff / self.scale
        return np.linalg.solve(self.scale, diff.T).T

    def pull_grad(self, g: np.ndarray) -> np.ndarray:
        """Gradient in φ from the gradient in θ: Lᵀ∇U, for a (K, d) batch."""
        if self.scale is None:
            return g
        return g * self.scale if self.scale.ndim == 1 else g @ self.scale

    def prior_in_phi(self, mean: np.ndarray, precision: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The Gaussian prior N(mean, diag(1/precision)) in φ: (precision matrix P, linear term b), density ∝ exp(−½φᵀPφ + bᵀφ)."""
        d = mean.shape[0]
        if self.scale is None:
            return np.diag(precision), precision * (mean - self.shift)
        Lmat = np.diag(self.scale) if self.scale.ndim == 1 else self.scale
        P = Lmat.T @ (precision[:, None] * Lmat)
        b = Lmat.T @ (precision * (mean - self.shift))
        return 0.5 * (P + P.T), b.reshape(d)


def total_value_and_grad(model: Model, pool: ShardPool, theta: np.ndarray) -> tuple[float, np.ndarray]:
    """U(θ) = Σ_i U_i(θ) + prior and its gradient, summed over the workers."""
    prior = model.prior()
    parts = pool.map(shard_value_and_grad, [(theta,)] * pool.num_shards)
    value = sum(p[0] for p in parts) + float(prior.potential(theta))
    grad = np.sum([p[1] for p in parts], axis=0) + prior.grad(theta)
    return value, grad


def find_map(model: Model, pool: ShardPool, *, x0: np.ndarray, dense_hessian: bool,
             newton_steps: int = 20, gtol: float = 1e-8) -> np.ndarray:
    """The MAP θ* = argmin U: L-BFGS on the workers' summed gradients, then Newton polish with summed Hessians."""
    res = scipy.optimize.minimize(lambda t: total_value_and_grad(model, pool, t), x0, jac=True,
                                  method="L-BFGS-B", options={"maxiter": 5000, "gtol": 1e-10})
    theta = res.x
    if not np.all(np.isfinite(theta)):
        raise FloatingPointError("MAP search diverged: the posterior may be improper for this data and prior")
    if dense_hessian:
        value, grad = total_value_and_grad(model, pool, theta)
        for _ in range(newton_steps):
            if np.max(np.abs(grad)) < gtol:
                break
            H = total_hessian(model, pool, theta)
            try:
                step = scipy.linalg.solve(H, grad, assume_a="pos")
            except (np.linalg.LinAlgError, scipy.linalg.LinAlgError):
                break  # not positive definite here: keep the L-BFGS point
            t = 1.0
            while t > 1e-6:
                cand = theta - t * step
                cv, cg = total_value_and_grad(model, pool, cand)
                if np.isfinite(cv) and cv <= value + 1e-12 * abs(value):
                    theta, value, grad = cand, cv, cg
                    break
                t *= 0.5
            else:
                break
    return theta


def total_hessian(model: Model, pool: ShardPool, theta: np.ndarray) -> np.ndarray:
    """∇²U(θ): the workers' Hessians summed, plus the prior precision."""
    H = np.sum(pool.map(shard_hessian, [(theta,)] * pool.num_shards), axis=0)
    H = H + np.diag(model.prior().precision)
    return 0.5 * (H + H.T)


def laplace_preconditioner(model: Model, pool: ShardPool, theta_map: np.ndarray, kind: str) -> Preconditioner:
    """θ = θ* + Lφ with L Lᵀ = (Σ_i ∇²U_i(θ*) + prior precision)⁻¹ (kind "laplace") or its diagonal ("diag").

    Falls back to the diagonal form when the summed Hessian is not positive definite (e.g. an MLP).
    """
    prior = model.prior()
    if kind == "laplace":
        H = total_hessian(model, pool, theta_map)
        try:
            C = np.linalg.cholesky(H)
            L = scipy.linalg.solve_triangular(C, np.eye(H.shape[0]), lower=True).T  # L = C⁻ᵀ, L Lᵀ = H⁻¹
            return Preconditioner(theta_map, L, "laplace")
        except np.linalg.LinAlgError:
            kind = "diag"
    diag = np.sum(pool.map(shard_hessian_diag, [(theta_map,)] * pool.num_shards), axis=0) + prior.precision
    return Preconditioner(theta_map, 1.0 / np.sqrt(np.clip(diag, 1e-12, None)), "diag")


def local_curvatures(model: Model, pool: ShardPool, theta: np.ndarray, precond: Preconditioner) -> np.ndarray:
    """Per-shard M_i = λ_max(Lᵀ∇²U_i(θ)L): the curvature met near the posterior mass, in φ coordinates."""
    return np.array(pool.map(shard_whitened_curvature, [(theta, precond.scale)] * pool.num_shards), dtype=float)


def local_quadratics(model: Model, pool: ShardPool, theta: np.ndarray, precond: Preconditioner,
                     dense: bool) -> list[tuple[np.ndarray, np.ndarray]]:
    """Every worker's (gradient, Hessian) of U_i at θ in φ coordinates (`shard_local_quadratic`)."""
    return pool.map(shard_local_quadratic, [(theta, precond.scale, dense)] * pool.num_shards)


def rho_for_bias_budget(quads: list[tuple[np.ndarray, np.ndarray]], prior_P: np.ndarray, prior_b: np.ndarray,
                        precond: Preconditioner, delta: float, rho_start: float) -> tuple[float, dict]:
    """The largest common ρ ≤ `rho_start` whose π_ρ, under the workers' quadratic (Laplace) models of U_i, keeps
    every θ coordinate's mean within δ posterior sd of the posterior's and its sd within a factor 1 + δ.

    `rho_start` = ((1 + δ)² − 1)/max_i M_i already bounds the sd inflation in every direction (not only along
    the coordinates); the search only lowers it where the means would move too far (shards that disagree).

    With U_i(z) ≈ g_iᵀz + ½zᵀP_iz in φ, π_ρ is Gaussian with precision Λ_ρ = P0 + Σ_i P_i(I + ρP_i)⁻¹ and mean
    Λ_ρ⁻¹(b0 − Σ_i (I + ρP_i)⁻¹g_i) (each local factor convolved with N(0, ρI)); ρ = 0 gives the posterior's.
    Found by bisection in log ρ. Returns ρ and the predicted mean shift and sd inflation.
    """
    dense = quads[0][1].ndim == 2
    L = None if precond.scale is None else (np.diag(precond.scale) if precond.scale.ndim == 1 else precond.scale)
    if dense:
        eig = [np.linalg.eigh(P) for _, P in quads]
        eig = [(np.clip(w, 0.0, None), V, V.T @ g) for (w, V), (g, _) in zip(eig, quads)]

    def moments(rho: float) -> tuple[np.ndarray, np.ndarray]:
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

    mean0, sd0 = moments(0.0)

    def bias(rho: float) -> tuple[float, float]:
        mean, sd = moments(rho)
        return float(np.max(np.abs(mean - mean0) / sd0)), float(np.max(sd / sd0) - 1.0)

    if max(bias(rho_start)) <= delta:
        shift, infl = bias(rho_start)
        return rho_start, {"predicted_mean_shift_sd": shift, "predicted_sd_inflation": infl}
    lo, hi = rho_start * 1e-6, rho_start
    for _ in range(40):
        mid = np.sqrt(lo * hi)
        shift, infl = bias(mid)
        lo, hi = (mid, hi) if max(shift, infl) <= delta else (lo, mid)
    shift, infl = bias(lo)
    return lo, {"predicted_mean_shift_sd": shift, "predicted_sd_inflation": infl}


def smoothness_bounds(model: Model, pool: ShardPool) -> np.ndarray:
    """Per-shard worst-case M_i from the models (the paper's rule)."""
    return np.array(pool.map(shard_smoothness, [()] * pool.num_shards), dtype=float)
