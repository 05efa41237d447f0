"""Bayesian Beta regression (brms' `Beta`, logit link): y_j ~ Beta(μ_j φ, (1 − μ_j) φ), μ_j = logistic(η_j), so
E y_j = μ_j and Var y_j = μ_j(1 − μ_j)/(1 + φ); θ = (β, log φ)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy.special import betaincinv, digamma, expit, gammaln, polygamma

from ..priors import Gamma, PositivePrior
from .common import RowTerms
from .rowfamily import RowFamilyGLM

__all__ = ["BetaRegression"]


@dataclass(frozen=True)
class BetaRegression(RowFamilyGLM):
    """0 < y_j < 1 with mean μ_j = logistic(η_j) and precision φ (brms' `Beta(link = "logit")`): with a = μφ and
    b = (1 − μ)φ, per row ℓ_j = −[log Γ(φ) − log Γ(a) − log Γ(b) + (a − 1) log y_j + (b − 1) log(1 − y_j)], the
    whole −log density.

    θ = (β, ρ = log φ). Priors: `coef_prior` N(0, 10²), `phi_prior` Gamma(0.01, 0.01) (brms' default on φ). Draws
    invert the regularised incomplete beta function. Responses must lie strictly between 0 and 1 (brms' Beta too;
    zeros and ones need a zero-one-inflated family)."""

    name = "beta_regression"
    target_kind = "real"

    phi_prior: PositivePrior | None = field(default=None, kw_only=True)

    _family_params = (("phi", "phi_prior", Gamma(0.01, 0.01)),)
    _support = ("Beta", "strictly between 0 and 1")

    def response_ok(self, y: np.ndarray) -> np.ndarray:
        return (y > 0) & (y < 1)

    def row_terms(self, X: np.ndarray, y: np.ndarray, eta: np.ndarray, psi: np.ndarray, order: int) -> RowTerms:
        """ℓ_j (class docstring), with s = μ(1 − μ), y* = logit y, μ* = ψ(a) − ψ(b): ∂ℓ/∂η = −φ s (y* − μ*),
        ∂²ℓ/∂η² = −φ s (1 − 2μ)(y* − μ*) + φ² s² (ψ′(a) + ψ′(b)); ∂ℓ/∂ρ = −φ D with
        D = ψ(φ) − μψ(a) − (1 − μ)ψ(b) + μ log y + (1 − μ) log(1 − y), ∂²ℓ/∂η∂ρ = ∂ℓ/∂η + φ² s (μψ′(a) − (1 − μ)ψ′(b)),
        ∂²ℓ/∂ρ² = ∂ℓ/∂ρ − φ² (ψ′(φ) − μ²ψ′(a) − (1 − μ)²ψ′(b))."""
        phi = np.exp(psi[:, 0])[None, :]
        mu = expit(eta)
        a, b = mu * phi, (1.0 - mu) * phi
        ly, l1y = np.log(y)[:, None], np.log1p(-y)[:, None]
        loss = -(gammaln(phi) - gammaln(a) - gammaln(b) + (a - 1.0) * ly + (b - 1.0) * l1y)
        if order == 0:
            return RowTerms(loss)
        s = mu * (1.0 - mu)
        da, db = digamma(a), digamma(b)
        resid = (ly - l1y) - (da - db)
        d1 = -phi * s * resid
        D = digamma(phi) - mu * da - (1.0 - mu) * db + mu * ly + (1.0 - mu) * l1y
        g_rows = -phi * D
        g_psi = g_rows.sum(axis=0)[:, None]
        if order == 1:
            return RowTerms(loss, d1, g_psi)
        ta, tb = polygamma(1, a), polygamma(1, b)
        d2 = -phi * s * (1.0 - 2.0 * mu) * resid + phi * phi * s * s * (ta + tb)
        h_er = d1 + phi * phi * s * (mu * ta - (1.0 - mu) * tb)
        h_rr = g_rows - phi * phi * (polygamma(1, phi) - mu * mu * ta - (1.0 - mu) ** 2 * tb)
        return RowTerms(loss, d1, g_psi, d2, h_er[:, :, None], h_rr.sum(axis=0)[:, None, None])

    def _curvature_weights(self, X: np.ndarray, y: np.ndarray) -> np.ndarray:
        """φ̂ s² (ψ′(a) + ψ′(b)) φ̂ ≈ φ̂ μ(1 − μ) at the fit: μ the shard's mean of y, φ̂ its moment estimate
        μ(1 − μ)/Var y − 1 (at least 1)."""
        m = float(np.clip(np.mean(y), 1e-3, 1 - 1e-3)) if y.size else 0.5
        v = float(np.var(y)) if y.size > 1 else 0.0
        phi = max(m * (1.0 - m) / v - 1.0, 1.0) if v > 0 else 1.0
        return np.full(y.shape[0], phi * m * (1.0 - m))

    # ------------------------------------------------------------------ checks of the fit

    def eta_log_likelihood(self, X: np.ndarray, y: np.ndarray, eta: np.ndarray, psi: np.ndarray) -> np.ndarray:
        return -self.row_terms(X, np.asarray(y, dtype=np.float64), eta, psi, 0).loss

    def eta_mean(self, X: np.ndarray, eta: np.ndarray, psi: np.ndarray) -> np.ndarray:
        return expit(eta)

    def eta_draw(self, X: np.ndarray, eta: np.ndarray, psi: np.ndarray, u: np.ndarray) -> np.ndarray:
        phi = np.exp(psi[:, 0])[None, :]
        mu = expit(eta)
        return betaincinv(mu * phi, (1.0 - mu) * phi, np.atleast_2d(u))
