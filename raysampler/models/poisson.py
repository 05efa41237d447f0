"""Bayesian Poisson regression with log link: y_j ~ Poisson(exp(x_jᵀθ)), y non-negative integer counts."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .common import _GLM, _check_Xy, _check_positive, _gram_lambda_max, _rows_of

__all__ = ["PoissonRegression"]


@dataclass(frozen=True)
class PoissonRegression(_GLM):
    """U_i(θ) = Σ_j [exp(x_jᵀθ) − y_j x_jᵀθ] (the constant Σ_j log y_j! is dropped).

    Gradient Xᵀ(μ − y), Hessian Xᵀ diag(μ) X with μ = exp(Xθ). The Hessian is unbounded over R^d, so
    `smoothness` is a documented curvature scale, not a global bound (see its docstring).
    Overflowing exp(x_jᵀθ) gives U = inf, which samplers treat as a rejected proposal.
    """

    name = "poisson_regression"
    target_kind = "count"

    #: multiplies the reference curvature in `smoothness`.
    smoothness_safety: float = 2.0

    def __post_init__(self):
        super().__post_init__()
        object.__setattr__(self, "smoothness_safety", _check_positive("smoothness_safety", self.smoothness_safety))

    def validate(self, X, y, argname: str = "data") -> None:
        X, y = _check_Xy(X, y, argname, self.n_features)
        if y.size:
            if y.min() < 0:
                raise ValueError(f"{argname}: counts y must be >= 0, got {y.min()}")
            if y.dtype.kind == "f" and not np.array_equal(y, np.floor(y)):
                raise ValueError(f"{argname}: counts y must be integers")

    def potential(self, X, y, x):
        eta = X @ x.T
        return np.exp(eta).sum(axis=0) - y @ eta

    def grad(self, X, y, x):
        r = np.exp(X @ x.T)
        r -= y[:, None]
        return r.T @ X

    def potential_and_grad(self, X, y, x):
        eta = X @ x.T
        r = np.exp(eta)
        U = r.sum(axis=0) - y @ eta
        r -= y[:, None]
        return U, r.T @ X

    def hvp(self, X, y, x, v):
        Xv = X @ v.T
        Xv *= np.exp(X @ x.T)
        return Xv.T @ X

    def hessian(self, X, y, x):
        mu = np.exp(X @ x)
        H = (X * mu[:, None]).T @ X
        return 0.5 * (H + H.T)

    def hessian_diag(self, X, y, x):
        x, single = _rows_of(x)
        diag = np.exp(X @ x.T).T @ (X * X)
        return diag[0] if single else diag

    def smoothness(self, X, y) -> float:
        """M_i = smoothness_safety · λ_max(Xᵀ diag(max(y_j, 1)) X): a curvature scale, *not* a global bound.

        The weights max(y_j, 1) ≥ 1 make it at least safety × ‖∇²U_i(0)‖ (the Hessian at θ = 0 is XᵀX), and
        since E[y_j] = μ_j, Xᵀ diag(y) X estimates the Hessian Xᵀ diag(μ) X at the data-generating θ, where
        the posterior lives. Far from there (large Xθ) the true Hessian can exceed M_i.
        """
        X = np.asarray(X, dtype=np.float64)
        w = np.maximum(np.asarray(y, dtype=np.float64), 1.0)
        return self.smoothness_safety * _gram_lambda_max(X * np.sqrt(w)[:, None])
