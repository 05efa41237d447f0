"""Bayesian linear regression with known noise, y = Xθ + N(0, σ²): a quadratic U_i with an exact Gaussian posterior."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import numpy as np
from scipy import linalg

from .base import GaussianPrior
from .common import _GLM, _check_positive, _gram_lambda_max, _rows_of

__all__ = ["LinearRegression", "linear_posterior"]


# ----------------------------------------------------------------------------- linear regression


@dataclass(frozen=True)
class LinearRegression(_GLM):
    """y = Xθ + ε, ε ~ N(0, noise_sd²) with σ = noise_sd known: U_i(θ) = ‖y − Xθ‖² / (2σ²).

    The normalising constant (n/2)·log(2πσ²) is dropped. The Hessian XᵀX/σ² does not depend on θ,
    so the posterior is exactly Gaussian (`posterior`, `linear_posterior`).
    """

    name = "linear_regression"
    target_kind = "real"

    noise_sd: float = 1.0

    def __post_init__(self):
        super().__post_init__()
        object.__setattr__(self, "noise_sd", _check_positive("noise_sd", self.noise_sd))

    # residuals R = Xθ − y for all chains at once: (n, K)
    def _resid(self, X, y, x):
        R = X @ x.T
        R -= y[:, None]
        return R

    def potential(self, X, y, x):
        R = self._resid(X, y, x)
        return np.einsum("nk,nk->k", R, R) * (0.5 / self.noise_sd**2)

    def grad(self, X, y, x):
        R = self._resid(X, y, x)
        return (R.T @ X) * (1.0 / self.noise_sd**2)

    def potential_and_grad(self, X, y, x):
        R = self._resid(X, y, x)
        s = 1.0 / self.noise_sd**2
        return np.einsum("nk,nk->k", R, R) * (0.5 * s), (R.T @ X) * s

    def hvp(self, X, y, x, v):
        return ((X @ v.T).T @ X) * (1.0 / self.noise_sd**2)

    def hessian(self, X, y, x):
        return (X.T @ X) * (1.0 / self.noise_sd**2)

    def hessian_diag(self, X, y, x):
        x, single = _rows_of(x)
        diag = np.einsum("np,np->p", X, X) * (1.0 / self.noise_sd**2)
        return diag if single else np.broadcast_to(diag, x.shape).copy()

    def smoothness(self, X, y) -> float:
        """Exact ‖∇²U_i‖ = λ_max(XᵀX)/σ² (the Hessian is constant)."""
        return _gram_lambda_max(X) / self.noise_sd**2

    def posterior(self, shards: Iterable[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
        """Exact posterior (mean, covariance) given all shards [(X_1, y_1), …] and the prior."""
        d = self.dim
        XtX = np.zeros((d, d))
        Xty = np.zeros(d)
        for X, y in shards:
            X = np.asarray(X, dtype=np.float64)
            XtX += X.T @ X
            Xty += X.T @ np.asarray(y, dtype=np.float64)
        return _gaussian_from_natural(self.prior(), XtX / self.noise_sd**2, Xty / self.noise_sd**2)


def linear_posterior(model: LinearRegression, X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Exact posterior (mean, covariance) of a bound `LinearRegression` on pooled data (X, y)."""
    return model.posterior([(X, y)])


def _gaussian_from_natural(prior: GaussianPrior, Q_lik: np.ndarray, b_lik: np.ndarray):
    """Posterior N(μ, Q⁻¹) with Q = diag(prior precision) + Q_lik and Qμ = prior precision ⊙ m0 + b_lik."""
    Q = Q_lik + np.diag(prior.precision)
    b = prior.precision * prior.mean + b_lik
    cf = linalg.cho_factor(Q, lower=True)
    mean = linalg.cho_solve(cf, b)
    cov = linalg.cho_solve(cf, np.eye(Q.shape[0]))
    return mean, 0.5 * (cov + cov.T)
