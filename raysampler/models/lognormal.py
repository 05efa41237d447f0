"""Bayesian lognormal regression (brms' `lognormal`): log y_j ~ N(x_jᵀβ, σ²), y > 0; θ = (β, log σ), or β with σ
known. The linear regression of log y: the same potential, gradients and curvature on z = log y, so the same
posterior of (β, σ) (and, seed for seed, the same draws) as `LinearRegression` fitted to log y."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
from scipy import special

from .common import RowTerms, _check_Xy
from .contract import Model, runs_own
from .linear import LinearRegression

__all__ = ["LogNormalRegression"]


def _log_y(y: np.ndarray) -> np.ndarray:
    return np.log(np.asarray(y, dtype=np.float64))


def _check_positive_y(y: np.ndarray, argname: str) -> None:
    if y.size and not np.all(y > 0):
        j = int(np.flatnonzero(~(y > 0))[0])
        raise ValueError(f"{argname}: the lognormal family's y must be > 0 in every row; row {j} has {y[j]!r}")


@dataclass(frozen=True)
class LogNormalRegression(LinearRegression):
    """log y = Xβ + ε, ε ~ N(0, σ²), y > 0 (brms' `lognormal`, identity link on log y's mean).

    Everything `LinearRegression` takes (`noise_sd` known or σ unknown with `sigma_prior`, default HalfNormal(10);
    coefficient prior N(0, 10²) with σ unknown), applied to z = log y: U_i is the linear regression's on z, so the
    posterior of (β, σ) is the one of the Gaussian family on log y (exactly, and draw for draw at the same seed).
    `log_likelihood` is the density of y itself: the Gaussian's on z less log y_j (the Jacobian), so LOO compares
    with other families of y. Predictions are on y's scale: E[y_j] = exp(η_j + σ²/2), draws exp(η_j + σ·Φ⁻¹(u)).
    """

    name = "lognormal_regression"
    target_kind = "real"

    def validate(self, X: np.ndarray, y: np.ndarray, argname: str = "data") -> None:
        X, y = _check_Xy(X, y, argname, self.n_features)
        _check_positive_y(y, argname)
        super().validate(X, _log_y(y), argname)

    # ------------------------------------------------------------------ the potential: the linear one on log y

    # (LinearRegression's potential and grad with σ unknown call self.potential_and_grad, which here takes y itself:
    # so they call LinearRegression's own on log y)
    def potential(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        if self.known_noise:
            return super().potential(X, _log_y(y), x)
        return super().potential_and_grad(X, _log_y(y), x)[0]

    def grad(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        if self.known_noise:
            return super().grad(X, _log_y(y), x)
        return super().potential_and_grad(X, _log_y(y), x)[1]

    def potential_and_grad(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return super().potential_and_grad(X, _log_y(y), x)

    def hvp(self, X: np.ndarray, y: np.ndarray, x: np.ndarray, v: np.ndarray) -> np.ndarray:
        return super().hvp(X, _log_y(y), x, v)

    def hessian(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        return super().hessian(X, _log_y(y), x)

    def hessians(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        if not runs_own(self, LogNormalRegression, "hessian"):
            return Model.hessians(self, X, y, x)
        return self._closed_hessians(X, _log_y(y), x)

    def hessian_diag(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        return super().hessian_diag(X, _log_y(y), x)

    def smoothness(self, X: np.ndarray, y: np.ndarray) -> float:
        return super().smoothness(X, _log_y(y))

    def row_terms(self, X: np.ndarray, y: np.ndarray, eta: np.ndarray, psi: np.ndarray, order: int) -> RowTerms:
        return super().row_terms(X, _log_y(y), eta, psi, order)

    def posterior(self, shards: Iterable[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
        """Exact posterior (mean, covariance) of β for a known noise sd: the linear regression's on log y."""
        return super().posterior([(X, _log_y(y)) for X, y in shards])

    # ------------------------------------------------------------------ checks of the fit: y's own scale

    def eta_log_likelihood(self, X: np.ndarray, y: np.ndarray, eta: np.ndarray, psi: np.ndarray) -> np.ndarray:
        z = _log_y(y)
        return super().eta_log_likelihood(X, z, eta, psi) - z[:, None]

    def eta_mean(self, X: np.ndarray, eta: np.ndarray, psi: np.ndarray) -> np.ndarray:
        sd = self._sd(X, psi)
        with np.errstate(over="ignore"):
            return np.exp(eta + 0.5 * np.square(sd))

    def eta_draw(self, X: np.ndarray, eta: np.ndarray, psi: np.ndarray, u: np.ndarray) -> np.ndarray:
        with np.errstate(over="ignore"):
            return np.exp(eta + self._sd(X, psi) * special.ndtri(np.atleast_2d(u)))

    def predict_mean(self, X: np.ndarray, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        return self.eta_mean(X, self._eta(X, x[:, : self.n_coef]), self._psi(x))
