"""Bayesian survival regression with right censoring (brms' `weibull` and `exponential`, log link on the mean):
the time y_j > 0 of row j is Weibull with shape k and mean μ_j = exp(η_j) (scale λ_j = μ_j/Γ(1 + 1/k)), or, where the
row is right-censored, known only to exceed y_j; θ = (β, log k). The exponential family is the shape-1 case, θ = β.

The censoring indicator is a per-row input like an offset (`censored`: a column of X named, or an array over the
rows): 0 where the event was observed at y_j, 1 where the row was right-censored at y_j (brms' `cens(censored)`
with its numeric coding; left (−1) and interval (2) censoring are not available)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
from scipy.special import digamma, gammaln, polygamma

from ..errors import ArgumentError
from ..priors import Gamma, PositivePrior
from .common import RowTerms, RowValues, _check_Xy
from .rowfamily import RowFamilyGLM

__all__ = ["ExponentialRegression", "WeibullRegression"]


def _check_censoring(values: np.ndarray, what: str, argname: str | None = None) -> None:
    """Censoring indicators must be 0 (event) or 1 (right-censored); the error names the first bad row."""
    bad = np.flatnonzero((values != 0) & (values != 1))
    if bad.size:
        j = int(bad[0])
        msg = (
            f"{what} must be 0 (event observed) or 1 (right-censored) in every row; row {j} has {float(values[j])!r}"
            + (" (left and interval censoring, brms' −1 and 2, are not available)" if values[j] in (-1, 2) else "")
        )
        if argname is None:
            raise ArgumentError(("model", "censored"), msg)
        raise ValueError(f"{argname}: {msg}")


@dataclass(frozen=True)
class _RightCensoredGLM(RowFamilyGLM):
    """What the survival families share: positive times, the censoring indicator `censored` (a per-row input), each
    row's event indicator δ_j = 1 − censored_j, the log link on the mean event time, and the Weibull's scale and
    quantiles at its shape k (`_shape`: k = 1 here, the exponential's; the Weibull's own is a parameter)."""

    target_kind = "real"
    _extra = "censored"

    censored: str | RowValues | None = field(
        default=None,
        kw_only=True,
        metadata={
            "description": "the right-censoring indicator (0: event observed, 1: censored), a column name (not a "
            "feature) or an array over the rows; absent = every event observed"
        },
    )

    def response_ok(self, y: np.ndarray) -> np.ndarray:
        return np.isfinite(y) & (y > 0)

    def _check_extra_values(self, values: np.ndarray, name: str) -> None:
        _check_censoring(values, name)

    def validate(self, X: np.ndarray, y: np.ndarray, argname: str = "data") -> None:
        X, y = _check_Xy(X, y, argname, self.n_features)
        self.check_response(y, argname)
        if self._xcol is not None:
            column = self.censored if isinstance(self.censored, str) else "censored"
            _check_censoring(X[:, self._xcol], f"the censoring indicator (column {column!r})", argname)

    def _events(self, X: np.ndarray, n: int) -> np.ndarray:
        """δ_j = 1 − censored_j (n, 1): 1 where the event was observed."""
        cens = self._extra_values(X)
        return np.ones((n, 1)) if cens is None else (1.0 - cens)[:, None]

    def _shape(self, psi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(log k, k), each (1, K): the shape 1 of the exponential family."""
        zero = np.zeros((1, psi.shape[0]))
        return zero, zero + 1.0

    def _curvature_weights(self, X: np.ndarray, y: np.ndarray) -> np.ndarray:
        """k²E ≈ 1 per event at the fit for k near 1 (E_j averages to about the events' share)."""
        return self._events(np.asarray(X, dtype=np.float64), y.shape[0])[:, 0]

    # ------------------------------------------------------------------ checks of the fit

    def eta_log_likelihood(self, X: np.ndarray, y: np.ndarray, eta: np.ndarray, psi: np.ndarray) -> np.ndarray:
        """log f(y_j) for an event, log S(y_j) for a right-censored row."""
        return -self.row_terms(X, np.asarray(y, dtype=np.float64), eta, psi, 0).loss

    def eta_mean(self, X: np.ndarray, eta: np.ndarray, psi: np.ndarray) -> np.ndarray:
        with np.errstate(over="ignore"):
            return np.exp(eta)

    def eta_draw(self, X: np.ndarray, eta: np.ndarray, psi: np.ndarray, u: np.ndarray) -> np.ndarray:
        _, k = self._shape(psi)
        with np.errstate(over="ignore"):
            scale = np.exp(eta - gammaln(1.0 + 1.0 / k))
            return scale * (-np.log1p(-np.atleast_2d(u))) ** (1.0 / k)


@dataclass(frozen=True)
class WeibullRegression(_RightCensoredGLM):
    """Weibull times with right censoring (module docstring): with L_j = η_j − log Γ(1 + 1/k) (log scale),
    u_j = k(log y_j − L_j), E_j = e^{u_j} = (y_j/λ_j)^k and δ_j = 1 − censored_j, per row
    ℓ_j = δ_j [−log k − (k − 1) log y_j + k L_j] + E_j: −log f(y_j) for an event, −log S(y_j) = E_j for a
    censored row (the whole −log likelihood, so `log_likelihood` is −ℓ_j).

    θ = (β, ρ = log k). Priors: `coef_prior` N(0, 10²), `shape_prior` Gamma(0.01, 0.01) (brms' default on the
    shape). Predictions are of the event time: mean μ_j, draws λ_j(−log(1 − u))^{1/k}. Times must be > 0."""

    name = "weibull_regression"

    shape_prior: PositivePrior | None = field(default=None, kw_only=True)

    _family_params: ClassVar[tuple] = (("shape", "shape_prior", Gamma(0.01, 0.01)),)
    _support = ("weibull", "> 0")

    def _shape(self, psi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(log k, k), each (1, K)."""
        rho = psi[:, 0][None, :]
        return rho, np.exp(rho)

    def row_terms(self, X: np.ndarray, y: np.ndarray, eta: np.ndarray, psi: np.ndarray, order: int) -> RowTerms:
        """ℓ_j (class docstring), with p₁ = ψ(1 + 1/k), w = u − p₁ (= ∂u/∂ρ): ∂ℓ/∂η = k(δ − E), ∂²ℓ/∂η² = k²E,
        ∂ℓ/∂ρ = −δ(1 + w) + E w, ∂²ℓ/∂η∂ρ = k(δ − E) − kEw, ∂²ℓ/∂ρ² = (E − δ)(w + ψ′(1 + 1/k)/k) + E w²."""
        rho, k = self._shape(psi)
        delta = self._events(X, y.shape[0])
        logy = np.log(y)[:, None]
        L = eta - gammaln(1.0 + 1.0 / k)
        u = k * (logy - L)
        with np.errstate(over="ignore"):
            E = np.exp(u)
        loss = delta * (-rho - (k - 1.0) * logy + k * L) + E
        if order == 0:
            return RowTerms(loss)
        d1 = k * (delta - E)
        p1 = digamma(1.0 + 1.0 / k)
        w = u - p1
        g_psi = (-delta * (1.0 + w) + E * w).sum(axis=0)[:, None]
        if order == 1:
            return RowTerms(loss, d1, g_psi)
        h_er = d1 - k * E * w
        h_rr = (E - delta) * (w + polygamma(1, 1.0 + 1.0 / k) / k) + E * w * w
        return RowTerms(loss, d1, g_psi, k * k * E, h_er[:, :, None], h_rr.sum(axis=0)[:, None, None])


@dataclass(frozen=True)
class ExponentialRegression(_RightCensoredGLM):
    """Exponential times with right censoring (brms' `exponential`): the Weibull family with shape k = 1, rate
    1/μ_j, μ_j = exp(η_j): ℓ_j = δ_j η_j + y_j e^{−η_j}; θ = β (prior `coef_prior`, N(0, 10²))."""

    name = "exponential_regression"
    _support = ("exponential", "> 0")

    def row_terms(self, X: np.ndarray, y: np.ndarray, eta: np.ndarray, psi: np.ndarray, order: int) -> RowTerms:
        """ℓ_j = δ_j η_j + E_j, E_j = y_j e^{−η_j}: ∂ℓ/∂η = δ − E, ∂²ℓ/∂η² = E (the Weibull's at k = 1, no ρ)."""
        delta = self._events(X, y.shape[0])
        with np.errstate(over="ignore"):
            E = np.exp(np.log(y)[:, None] - eta)
        loss = delta * eta + E
        if order == 0:
            return RowTerms(loss)
        K = eta.shape[1]
        g_psi = np.zeros((K, 0))
        if order == 1:
            return RowTerms(loss, delta - E, g_psi)
        return RowTerms(loss, delta - E, g_psi, E, np.zeros(E.shape + (0,)), np.zeros((K, 0, 0)))
