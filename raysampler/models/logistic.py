"""Bayesian logistic regression: P(y = 1 | x, θ) = σ(xᵀθ), y ∈ {0, 1}; the intercept is a column of X."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import expit

from .common import _GLM, _check_Xy, _gram_lambda_max, _rows_of

__all__ = ["LogisticRegression"]


@dataclass(frozen=True)
class LogisticRegression(_GLM):
    """U_i(θ) = Σ_j [log(1 + exp(x_jᵀθ)) − y_j x_jᵀθ], computed stably for all K chains with η = X Θᵀ (n, K).

    Gradient Xᵀ(σ(η) − y); Hessian Xᵀ diag(σ(η)(1 − σ(η))) X ≼ XᵀX/4, hence `smoothness` = λ_max(XᵀX)/4.
    """

    name = "logistic_regression"
    target_kind = "binary"

    def validate(self, X, y, argname: str = "data") -> None:
        X, y = _check_Xy(X, y, argname, self.n_features)
        if y.size and not np.isin(y, (0, 1)).all():
            bad = np.unique(y[~np.isin(y, (0, 1))])[:5]
            raise ValueError(f"{argname}: labels y must be 0 or 1, found {bad.tolist()}")

    def potential(self, X, y, x):
        eta = X @ x.T
        return np.logaddexp(0.0, eta).sum(axis=0) - y @ eta

    def grad(self, X, y, x):
        r = expit(X @ x.T)
        r -= y[:, None]
        return r.T @ X

    def potential_and_grad(self, X, y, x):
        # softplus(η) = max(η, 0) + log1p(e) and σ(η) = (1 if η ≥ 0 else e)/(1 + e) share e = exp(−|η|);
        # two (n, K) buffers reused in place: large temporaries dominate the cost on big shards.
        eta = X @ x.T
        e = np.abs(eta)
        np.negative(e, out=e)
        np.exp(e, out=e)
        t = np.maximum(eta, 0.0)
        U = t.sum(axis=0)
        np.log1p(e, out=t)
        U += t.sum(axis=0)
        U -= y @ eta
        np.add(e, 1.0, out=t)
        np.copyto(e, 1.0, where=eta >= 0.0)
        e /= t  # σ(η)
        e -= y[:, None]
        return U, e.T @ X

    def _weights(self, X, x):
        """σ(η)(1 − σ(η)) for η = X Θᵀ: (n, K)."""
        s = expit(X @ x.T)
        return s * (1.0 - s)

    def hvp(self, X, y, x, v):
        Xv = X @ v.T
        Xv *= self._weights(X, x)
        return Xv.T @ X

    def hessian(self, X, y, x):
        w = self._weights(X, x[None, :])[:, 0]
        H = (X * w[:, None]).T @ X
        return 0.5 * (H + H.T)

    def hessian_diag(self, X, y, x):
        x, single = _rows_of(x)
        diag = self._weights(X, x).T @ (X * X)
        return diag[0] if single else diag

    def smoothness(self, X, y) -> float:
        """M_i = λ_max(XᵀX)/4, a global bound since σ(1 − σ) ≤ 1/4."""
        return 0.25 * _gram_lambda_max(X)
