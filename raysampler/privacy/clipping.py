"""Per-example gradient clipping for the DP mode's Langevin steps: ĝ(z) = Σ_r clip(∇ℓ_r(z), C) with
clip(g, C) = g · min(1, C/‖g‖₂), so that adding or removing one row moves ĝ by at most C (`accountant`, (P1)).

With `clip_rule="features"` (logistic regression, where |∂ℓ_r/∂η_r| = |σ(η_r) − y_r| ≤ 1) row r's gradient is
scaled by w_r = min(1, C/‖x_r‖) instead, a weight of its features alone: ‖w_r ∇ℓ_r‖ ≤ w_r ‖x_r‖ ≤ C for every θ,
so the sensitivity is the same, and ĝ = ∇ Σ_r w_r ℓ_r is the gradient of a weighted likelihood.

Vectorised over rows and chains from each model's per-row score, without forming the (rows, chains, d) tensor where
the score factors: a GLM's row gradient is d1_r x_r (d1 = ∂ℓ_r/∂η_r from `row_terms`), whose norm is |d1_r|·‖x_r‖.
Models with a per-row score: the GLMs whose every parameter is a coefficient (logistic, binomial, Poisson, linear
regression with known noise) and the Gaussian mean model (∇ℓ_r = Σ1⁻¹(θ − y_r)). Another model is refused by
`check_clippable` with an error naming it.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
from scipy.special import expit

from ..errors import ArgumentError
from ..models.common import _GLM
from ..models.gaussian import Gaussian
from ..models.logistic import LogisticRegression
from ..reparam import WithPriorShare


class Clipped(NamedTuple):
    """Σ_r clip(∇ℓ_r(z), C) (plus any data-free prior share) at K points (K, d), and how many of the n rows' gradients
    were clipped at each point (K,)."""

    grad: np.ndarray
    clipped: np.ndarray


def check_clippable(model: Any, rule: str = "gradient") -> None:
    """ArgumentError naming `privacy` and the model unless its per-row gradients are available (see the module), or
    with rule "features" unless it is logistic regression (a score bounded by 1 per unit of ‖x‖)."""
    inner = model.model if isinstance(model, WithPriorShare) else model
    if rule == "features" and type(inner) is not LogisticRegression:
        name = getattr(inner, "name", type(inner).__name__)
        raise ArgumentError(
            ("privacy", "clip_rule"),
            f"privacy.clip_rule='features' needs a score bounded by the features (logistic regression), not {name!r}",
        )
    if isinstance(inner, Gaussian):
        return
    if isinstance(inner, _GLM) and type(inner).row_terms is not _GLM.row_terms:
        if inner.group_effects is not None:
            raise ArgumentError(
                ("privacy",), f"privacy= does not support group effects ({inner.name} with group_effects)"
            )
        if inner.dim == inner.n_coef:
            return
    name = getattr(inner, "name", type(inner).__name__)
    raise ArgumentError(
        ("privacy",),
        f"privacy= clips per-example gradients, and model {name!r} has no per-row gradient here (supported: GLMs "
        "whose parameters are all coefficients — logistic, binomial, poisson, linear regression with known noise — "
        "and the Gaussian mean model)",
    )


def clipped_grad(
    model: Any, X: np.ndarray, y: np.ndarray, x: np.ndarray, clip: float, rule: str = "gradient"
) -> Clipped:
    """ĝ at the K points x (K, d) for one shard's rows (X, y), by clip rule `rule` (see the module)."""
    share = None
    if isinstance(model, WithPriorShare):  # the prior's non-Gaussian share reads no row: added unclipped
        share = model.weight * model.term.grad(x)
        model = model.model
    if isinstance(model, Gaussian):
        rows = np.einsum("kp,pq->kq", x, model.noise_precision)[None, :, :] - (y @ model.noise_precision)[:, None, :]
        norms = np.linalg.norm(rows, axis=2)  # (n, K)
        scale = np.minimum(1.0, clip / np.maximum(norms, 1e-300))
        grad = np.einsum("nk,nkd->kd", scale, rows)
    else:
        eta = model._eta(X, x[:, : model.n_coef])
        if type(model) is LogisticRegression:  # its d1 = σ(η) − y without the losses row_terms also computes
            d1 = expit(eta)
            d1 -= y[:, None]
        else:
            d1 = model.row_terms(X, y, eta, x[:, model.n_coef :], 1).d1  # (n, K)
        Xc = model._coef_X(X)
        x_norms = np.sqrt(np.einsum("ij,ij->i", Xc, Xc))
        if rule == "features":
            weight = np.minimum(1.0, clip / np.maximum(x_norms, 1e-300))
            grad = (d1 * weight[:, None]).T @ Xc
            clipped = np.full(x.shape[0], float(np.count_nonzero(x_norms > clip)))
            return Clipped(grad if share is None else grad + share, clipped)
        norms = np.abs(d1) * x_norms[:, None]
        scale = np.minimum(1.0, clip / np.maximum(norms, 1e-300))
        grad = (d1 * scale).T @ Xc
    clipped = np.count_nonzero(norms > clip, axis=0).astype(float)
    return Clipped(grad if share is None else grad + share, clipped)


def clipped_grad_stacked(
    model: Any, X: np.ndarray, y: np.ndarray, x: np.ndarray, clip: np.ndarray, rule: str = "gradient"
) -> Clipped:
    """`clipped_grad` of B stacked shards (X (B, n, p), y (B, n, ...), x (B, K, d), clip (B, 1, 1)): (B, K, d) and
    (B, K)."""
    parts = [clipped_grad(model, X[j], y[j], x[j], float(clip[j].flat[0]), rule) for j in range(x.shape[0])]
    return Clipped(np.stack([p.grad for p in parts]), np.stack([p.clipped for p in parts]))
