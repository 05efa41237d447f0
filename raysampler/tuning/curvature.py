"""Curvature from the workers: λ_max of each shard's whitened Hessian at the MAP (what the samplers meet), the models'
worst-case smoothness bounds M_i (the papers' plain rules), and L = Σ_i M_i + the prior's largest precision."""

from __future__ import annotations

import numpy as np

from ..models import Model
from ..reparam import Preconditioner, WhitenedModel
from .shards import ShardPool


def shard_smoothness(model: Model, X: np.ndarray, y: np.ndarray) -> float:
    """The model's bound M_i on ‖∇²U_i‖ for one shard."""
    return float(model.smoothness(X, y))


def shard_whitened_curvature(
    model: Model, X: np.ndarray, y: np.ndarray, precond: Preconditioner, iters: int = 100, tol: float = 1e-4
) -> float:
    """λ_max(Lᵀ∇²U_i(θ*)L) by power iteration on Hessian-vector products: the curvature actually met at the MAP."""
    wm = WhitenedModel(model, precond)
    d = wm.dim
    v = np.ones(d) + 0.1 * np.sin(np.arange(1, d + 1))  # fixed start: deterministic on every executor
    v /= np.linalg.norm(v)
    origin = np.zeros((1, d))
    lam = 0.0
    for _ in range(iters):
        w = wm.hvp(X, y, origin, v[None, :])[0]
        new = float(np.linalg.norm(w))
        if new == 0.0 or not np.isfinite(new):
            return max(new, 0.0) if np.isfinite(new) else float("inf")
        v = w / new
        if abs(new - lam) <= tol * new:
            return new
        lam = new
    return lam


def local_curvatures(model: Model, pool: ShardPool, precond: Preconditioner) -> np.ndarray:
    """Per-shard M_i = λ_max(Lᵀ∇²U_i(θ*)L): the curvature met near the posterior mass, in φ coordinates."""
    return np.array(pool.map(shard_whitened_curvature, [(precond,)] * pool.num_shards), dtype=float)


def smoothness_bounds(model: Model, pool: ShardPool) -> np.ndarray:
    """Per-shard worst-case M_i from the models (the paper's rule)."""
    return np.array(pool.map(shard_smoothness, [()] * pool.num_shards), dtype=float)


def lipschitz_bound(model: Model, pool: ShardPool) -> float:
    """L = Σ_i M_i + max prior precision (M_i = `smoothness_bounds`): a bound on ‖∇²U‖ (the plain rules)."""
    return float(np.sum(smoothness_bounds(model, pool)) + model.prior().gaussian.max_precision())
