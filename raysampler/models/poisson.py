"""Bayesian Poisson regression with log link: y_j ~ Poisson(exp(x_jᵀβ + o_j)), y non-negative integer counts, o_j an
optional offset (log exposure)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy.special import gammaln

from .common import (
    RowTerms,
    RowValues,
    _check_positive,
    _check_Xy,
    _EtaGLM,
    _gram_lambda_max,
    _rows_of,
    weighted_grams,
)
from .contract import runs_own

__all__ = ["PoissonRegression"]


def _check_counts(y: np.ndarray, argname: str) -> None:
    if y.size:
        if y.min() < 0:
            raise ValueError(f"{argname}: counts y must be >= 0, got {y.min()}")
        if y.dtype.kind == "f" and not np.array_equal(y, np.floor(y)):
            raise ValueError(f"{argname}: counts y must be integers")


@dataclass(frozen=True)
class PoissonRegression(_EtaGLM):
    """U_i(β) = Σ_j [exp(η_j) − y_j η_j], η_j = x_jᵀβ + o_j (the constants Σ_j log y_j! and the offset's y_j o_j are
    dropped).

    `offset` (log exposure) is the name of a column of X (then not a feature) or an array over the original data's
    rows (see `_GLM` and `shard_data`). Gradient X_cᵀ(μ − y), Hessian X_cᵀ diag(μ) X_c with μ = exp(η). The Hessian
    is unbounded over R^d, so `smoothness` is a documented curvature scale, not a global bound (see its docstring).
    Overflowing exp(η) gives U = inf, which samplers treat as a rejected proposal.
    """

    name = "poisson_regression"
    target_kind = "count"
    _extra = "offset"
    _takes_groups = True

    #: multiplies the reference curvature in `smoothness`.
    smoothness_safety: float = 2.0
    offset: str | RowValues | None = field(default=None, kw_only=True)

    def __post_init__(self) -> None:
        object.__setattr__(self, "smoothness_safety", _check_positive("smoothness_safety", self.smoothness_safety))
        super().__post_init__()

    def validate(self, X: np.ndarray, y: np.ndarray, argname: str = "data") -> None:
        X, y = _check_Xy(X, y, argname, self.n_features)
        _check_counts(y, argname)

    def potential(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        eta = self._eta(X, x)
        with np.errstate(over="ignore"):
            return np.exp(eta).sum(axis=0) - y @ eta

    def grad(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        with np.errstate(over="ignore"):
            r = np.exp(self._eta(X, x))
        r -= y[:, None]
        return self._pull(X, r)

    def potential_and_grad(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        eta = self._eta(X, x)
        with np.errstate(over="ignore"):
            r = np.exp(eta)
        U = r.sum(axis=0) - y @ eta
        r -= y[:, None]
        return U, self._pull(X, r)

    def hvp(self, X: np.ndarray, y: np.ndarray, x: np.ndarray, v: np.ndarray) -> np.ndarray:
        Xv = self._eta_dir(X, v)
        with np.errstate(over="ignore"):
            Xv *= np.exp(self._eta(X, x))
        return self._pull(X, Xv)

    def hessian(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        Xc = self._coef_X(X)
        with np.errstate(over="ignore"):
            mu = np.exp(self._eta(X, np.asarray(x, dtype=np.float64)[None, :])[:, 0])
        H = (Xc * mu[:, None]).T @ Xc
        return 0.5 * (H + H.T)

    def hessians(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        """X_cᵀ diag(μ) X_c at the K points at once (`weighted_grams`)."""
        if not runs_own(self, PoissonRegression, "hessian"):
            return super().hessians(X, y, x)
        with np.errstate(over="ignore"):
            mu = np.exp(self._eta(X, np.asarray(x, dtype=np.float64)))
        return weighted_grams(self._coef_X(X), mu)

    def hessian_diag(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        x, single = _rows_of(x)
        Xc = self._coef_X(X)
        with np.errstate(over="ignore"):
            diag = np.exp(self._eta(X, x)).T @ (Xc * Xc)
        return diag[0] if single else diag

    def smoothness(self, X: np.ndarray, y: np.ndarray) -> float:
        """M_i = smoothness_safety · λ_max(X_cᵀ diag(max(y_j, 1)) X_c): a curvature scale, *not* a global bound.

        Since E[y_j] = μ_j, X_cᵀ diag(y) X_c estimates the Hessian X_cᵀ diag(μ) X_c at the data-generating β, where
        the posterior lives; without an offset the weights max(y_j, 1) ≥ 1 also make M_i at least safety × the
        Hessian at β = 0 (XᵀX). Far from there (large η) the true Hessian can exceed M_i.
        """
        Xc = np.asarray(self._coef_X(np.asarray(X, dtype=np.float64)), dtype=np.float64)
        w = np.maximum(np.asarray(y, dtype=np.float64), 1.0)
        return self.smoothness_safety * _gram_lambda_max(Xc * np.sqrt(w)[:, None])

    # ------------------------------------------------------------------ per row (group effects)

    def row_terms(self, X: np.ndarray, y: np.ndarray, eta: np.ndarray, psi: np.ndarray, order: int) -> RowTerms:
        """ℓ_j = e^η − yη; ∂ℓ/∂η = e^η − y; ∂²ℓ/∂η² = e^η."""
        with np.errstate(over="ignore"):
            mu = np.exp(eta)
        loss = mu - y[:, None] * eta
        if order == 0:
            return RowTerms(loss)
        d1 = mu - y[:, None]
        return RowTerms(loss, d1, psi[:, :0]) if order == 1 else RowTerms(loss, d1, psi[:, :0], mu)

    def eta_log_likelihood(self, X: np.ndarray, y: np.ndarray, eta: np.ndarray, psi: np.ndarray) -> np.ndarray:
        y = np.asarray(y, dtype=np.float64)
        with np.errstate(over="ignore"):
            return y[:, None] * eta - np.exp(eta) - gammaln(y + 1.0)[:, None]

    def eta_mean(self, X: np.ndarray, eta: np.ndarray, psi: np.ndarray) -> np.ndarray:
        with np.errstate(over="ignore"):
            return np.exp(eta)

    def eta_draw(self, X: np.ndarray, eta: np.ndarray, psi: np.ndarray, u: np.ndarray) -> np.ndarray:
        # here, not at import: scipy.stats is slow to import, and every worker process would pay for it
        # (docs/performance.md, "Measurements behind choices in the code")
        from scipy import stats

        return stats.poisson.ppf(np.atleast_2d(u), self.eta_mean(X, eta, psi))
